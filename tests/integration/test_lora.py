"""LoRA adapters per policy through the real trainer on CPU (verl's engine with peft): two steps
train only the adapters (the base weights bit-identical, the adapters moved), the generation
backend serves the merged weights, the checkpoint holds each policy's adapter in PEFT's format
(which peft loads without this project) next to the merged model, and evaluation plays the
checkpoint. The run's teacher is the students' base model on a policy's engine with its adapter
off (teacher.backend=lora_base): no teacher engine, and its log-probs are the base model's."""

import json
import math
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl_masopd.config import compose_config
from verl_masopd.config.validate import validate_config
from verl_masopd.engine.policy_engine import EngineSettings, Lora, PolicyEngine
from verl_masopd.teacher.engine_scorer import AdapterOff, scoring_batch
from verl_masopd.teacher.scoring import ScoreRequest
from verl_masopd.trainer.loop import Trainer

pytestmark = pytest.mark.integration

LORA = ("actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=8")
RANKS = {"reasoner": 8, "tool_user": 4}  # the Reasoner's own section overrides the shared rank


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, tiny_model_path, builtin_data):
    """Two masopd steps with adapters, saved; returns (trainer, initial weights, checkpoint folder)."""
    root = tmp_path_factory.mktemp("lora")
    cfg = compose_config(
        [
            "preset=cpu",
            "engines.placement=local",
            f"students.path={tiny_model_path}",
            f"teacher.model_path={tiny_model_path}",
            "teacher.backend=lora_base",
            f"data.train_files=[{builtin_data['math']}]",
            "workflow.domain=math",
            "data.train_batch_size=1",
            "data.max_response_length=24",
            "rollout.group_size=2",
            "workflow.horizon=2",
            "trainer.total_training_steps=2",
            "trainer.save_freq=-1",
            "trainer.logger=[console]",
            f"trainer.default_local_dir={root / 'checkpoints'}",
            "+students.lora.reasoner.lora_rank=8",
            "actor_rollout_ref.actor.optim.lr=1e-2",  # adapters that move the log-probs visibly in two steps
            *LORA,
        ]
    )
    trainer = Trainer(validate_config(cfg))
    initial = AutoModelForCausalLM.from_pretrained(tiny_model_path).state_dict()
    losses = []
    for _ in range(2):
        metrics = trainer.train_step()
        losses += [v for k, v in metrics.items() if k.endswith("/actor/pg_loss")]
    assert len(losses) == 4 and all(math.isfinite(v) for v in losses), losses
    folder = trainer.save()
    yield trainer, initial, folder
    trainer.close()


def _shard(folder) -> dict[str, torch.Tensor]:
    state = torch.load(folder / "model_world_size_1_rank_0.pt", weights_only=False)
    return {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in state.items()}


def test_only_the_adapters_train(lora_run):
    trainer, initial, folder = lora_run
    for name in RANKS:
        shard = _shard(folder / f"policy_{name}")
        base = {k: v for k, v in shard.items() if "lora_" not in k}
        adapters = {k: v for k, v in shard.items() if "lora_" in k}
        assert len(adapters) == 2 * 28  # A and B on the 28 linear layers (all-linear: not lm_head)
        for key, tensor in base.items():  # base_model.model.<hf name>, ".base_layer" inside a LoRA layer
            hf_name = key.removeprefix("base_model.model.").replace(".base_layer", "")
            assert torch.equal(tensor, initial[hf_name]), f"{name}: base weight {hf_name} moved"
        lora_b = [v for k, v in adapters.items() if "lora_B" in k]
        assert all(v.shape[1] == RANKS[name] for v in lora_b)
        assert sum(int(v.abs().sum() > 0) for v in lora_b) == len(lora_b), "B starts at 0: every B must move"


def test_the_lora_base_teacher_is_the_base_model_with_the_adapter_off(lora_run, tiny_model_path):
    trainer, initial, _ = lora_run
    engine = trainer.policies["reasoner"].engine
    assert trainer.teacher.scorers[0].engine.engine is engine  # the policy's own engine: no teacher engine
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    requests = [ScoreRequest([5, 17, 40, 41, 9], [30, 31, 32, 33]), ScoreRequest([5, 17, 60], [70, 71, 72, 73, 74, 75])]
    expected = []
    for r in requests:
        with torch.no_grad():
            logits = base(torch.tensor([r.context_ids + r.response_ids])).logits[0].log_softmax(-1)
        positions = range(len(r.context_ids) - 1, len(r.context_ids) + len(r.response_ids) - 1)
        expected.append([logits[i, t].item() for i, t in zip(positions, r.response_ids, strict=True)])
    off = AdapterOff(engine)
    log_probs = off.infer_batch(scoring_batch(requests, trainer.pad_id))
    shared, _ = off.score_shared_prefix(requests)
    with_adapter = engine.infer_batch(scoring_batch(requests, trainer.pad_id))
    for b, r in enumerate(requests):
        n = len(r.response_ids)
        assert log_probs[b, :n].tolist() == pytest.approx(expected[b], abs=1e-5)
        assert shared[b] == pytest.approx(expected[b], abs=1e-5)
        assert (with_adapter[b, :n] - torch.tensor(expected[b])).abs().max() > 1e-3, "the adapter moved the policy"


def test_the_backend_serves_the_merged_weights(lora_run):
    trainer, initial, _ = lora_run
    for name, policy in trainer.policies.items():
        merged = policy.engine.hf_state_dict()
        served = policy.backend.model.state_dict()
        assert all(torch.equal(served[k], merged[k]) for k in merged), f"{name}: backend not synced"
        moved = [k for k in merged if not torch.equal(merged[k], initial[k])]
        assert "model.layers.0.self_attn.q_proj.weight" in moved and "model.embed_tokens.weight" not in moved


def test_peft_loads_each_adapter_without_this_project(lora_run, tiny_model_path):
    _, _, folder = lora_run
    for name, rank in RANKS.items():
        adapter = folder / f"policy_{name}" / "adapter"
        assert json.loads((adapter / "adapter_config.json").read_text())["r"] == rank
        code = (
            "import sys, torch; from peft import PeftModel; from transformers import AutoModelForCausalLM as M\n"
            "merged = PeftModel.from_pretrained(M.from_pretrained(sys.argv[1]), sys.argv[2]).merge_and_unload()\n"
            "saved = M.from_pretrained(sys.argv[3]).state_dict()\n"
            "print(max((merged.state_dict()[k] - v).abs().max().item() for k, v in saved.items()))"
        )
        gap = subprocess.run(
            [sys.executable, "-c", code, tiny_model_path, str(adapter), str(folder / f"policy_{name}" / "huggingface")],
            capture_output=True,
            text=True,
            check=True,
        )
        assert float(gap.stdout.strip()) < 1e-6, gap.stdout


def test_the_merge_helper_writes_the_checkpoints_merged_model(lora_run, tmp_path):
    _, _, folder = lora_run
    policy = folder / "policy_reasoner"

    def merge(*args):
        command = [sys.executable, "-m", "verl_masopd.merge_adapter", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=600)

    done = merge("--adapter", str(policy / "adapter"), "--out", str(tmp_path / "merged"))
    assert done.returncode == 0, done.stderr[-3000:]
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged").state_dict()
    saved = AutoModelForCausalLM.from_pretrained(policy / "huggingface").state_dict()
    assert max((merged[k] - v).abs().max().item() for k, v in saved.items()) < 1e-6
    assert (tmp_path / "merged" / "tokenizer_config.json").is_file()
    again = merge("--adapter", str(policy / "adapter"), "--out", str(tmp_path / "merged"))
    assert again.returncode == 2 and again.stderr.strip().splitlines() == [
        f"merge_adapter: --out: {tmp_path / 'merged'} exists; merging never overwrites a folder"
    ]
    missing = merge("--adapter", str(tmp_path), "--out", str(tmp_path / "other"))
    assert missing.returncode == 2 and "--adapter: no PEFT adapter at" in missing.stderr
    assert not (tmp_path / "other").exists()


def test_evaluation_plays_the_lora_checkpoint(lora_run, builtin_data, tmp_path):
    _, _, folder = lora_run
    out = tmp_path / "eval"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "verl_masopd.eval",
            "--data",
            str(builtin_data["math"]),
            "--checkpoint",
            str(folder),
            "--limit",
            "2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    settings = json.loads((out / "settings.json").read_text())
    assert settings["checkpoint"] == str(folder.resolve())
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert records and all(
        set(e["turns"][0]["outputs"]) == {"reasoner_0", "tool_user_0"} for r in records for e in r["episodes"]
    )


def test_a_peft_adapter_is_the_starting_point_of_a_new_run(lora_run, tiny_model_path):
    _, _, folder = lora_run
    adapter = folder / "policy_reasoner" / "adapter"
    engine = PolicyEngine.local(
        EngineSettings(model_path=tiny_model_path, lora=Lora(rank=8, alpha=8, adapter_path=str(adapter)))
    )
    saved = AutoModelForCausalLM.from_pretrained(folder / "policy_reasoner" / "huggingface").state_dict()
    started = engine.hf_state_dict()
    assert max((started[k] - saved[k]).abs().max().item() for k in saved) < 1e-6
