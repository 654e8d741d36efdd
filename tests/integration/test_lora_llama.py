"""LoRA on a Llama-architecture model's own module names (q_proj, k_proj, v_proj, o_proj, gate_proj,
up_proj, down_proj), on a tiny LlamaForCausalLM built offline: the start-up check accepts the names,
an update trains an adapter on every one of them, and the saved adapter is loaded by peft alone
(another process, without this project) into the same weights as the checkpoint's merged model."""

import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM

from verl_masopd.config.lora import policy_loras
from verl_masopd.engine.policy_engine import ADAPTER_FOLDER, EngineSettings, PolicyEngine, policy_loss

pytestmark = pytest.mark.integration

LLAMA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
LAYERS = 2


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory, tiny_tokenizer) -> str:
    """A LlamaForCausalLM of 2 layers (4 heads, 2 KV heads, hidden 64) with the tiny tokenizer."""
    folder = tmp_path_factory.mktemp("llama")
    config = LlamaConfig(
        vocab_size=len(tiny_tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=tiny_tokenizer.bos_token_id,
        eos_token_id=tiny_tokenizer.eos_token_id,
        pad_token_id=tiny_tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    return str(folder)


def test_a_llama_adapter_on_its_own_module_names_loads_in_peft_alone(tiny_llama, make_policy_batch, tmp_path):
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(
        {"actor_rollout_ref": {"model": {"lora_rank": 4, "lora_alpha": 8, "target_modules": list(LLAMA_MODULES)}}}
    )
    lora = policy_loras(cfg, {"coder": tiny_llama})["coder"]
    assert lora.target_modules == LLAMA_MODULES
    engine = PolicyEngine.local(EngineSettings(model_path=tiny_llama, lr=1e-2, seed=0, lora=lora))
    batch = make_policy_batch([6, 4, 5], [3, 5, 4], seed=7)
    batch.batch["old_log_probs"] = engine.infer_batch(batch)
    engine.train_mini_batch(batch, policy_loss("vanilla"))
    engine.save_checkpoint(tmp_path, step=1)

    adapter = tmp_path / ADAPTER_FOLDER
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert sorted(config["target_modules"]) == sorted(LLAMA_MODULES) and config["r"] == 4
    weights = load_file(adapter / "adapter_model.safetensors")
    # A and B on every adapted projection of every layer, and B moved away from its zero start
    for module in LLAMA_MODULES:
        named = [k for k in weights if f".{module}.lora_B" in k]
        assert len(named) == LAYERS, (module, named)
        assert all(weights[k].abs().max() > 0 for k in named), module
    assert len(weights) == 2 * LAYERS * len(LLAMA_MODULES)

    code = (
        "import sys; from peft import PeftModel; from transformers import AutoModelForCausalLM as M\n"
        "peft = PeftModel.from_pretrained(M.from_pretrained(sys.argv[1]), sys.argv[2])\n"
        "kinds = sorted({n.split('.lora_A')[0].split('.')[-1] for n, _ in peft.named_parameters() if 'lora_A' in n})\n"
        "merged = peft.merge_and_unload().state_dict()\n"
        "saved = M.from_pretrained(sys.argv[3]).state_dict()\n"
        "base = M.from_pretrained(sys.argv[1]).state_dict()\n"
        "moved = sum(not (merged[k] == v).all().item() for k, v in base.items())\n"
        "print(','.join(kinds), max((merged[k] - v).abs().max().item() for k, v in saved.items()), moved)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, tiny_llama, str(adapter), str(tmp_path / "huggingface")],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,  # away from the repository: peft and transformers alone
    )
    kinds, gap, moved = done.stdout.split()
    assert kinds.split(",") == sorted(LLAMA_MODULES)
    assert float(gap) < 1e-6  # peft's merge of the adapter is the checkpoint's merged model
    assert int(moved) == LAYERS * len(LLAMA_MODULES)  # exactly the adapted projections differ from the base
