"""examples/solver_verifier.py trains its Solver–Verifier workflow, selected by `workflow.name`,
with an existing estimator (opd, the tiny teacher) for one step on the CPU setup: the run
completes, the roles' metrics are logged, and both policies' saved weights differ from the start."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl_masopd.engine.policy_engine import RENDEZVOUS_VARIABLES

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "solver_verifier.py"


def test_solver_verifier_example_trains_both_policies(trainer_overrides, tiny_model_path, tmp_path):
    overrides = trainer_overrides(
        "math",
        "workflow.name=solver_verifier",
        "algorithm.adv_estimator=opd",
        "trainer.total_training_steps=1",
        "data.max_response_length=8",
        f"hydra.run.dir={tmp_path / 'hydra'}",
    )
    # a fresh process as a user starts it: not the rendezvous of the engines this test process holds
    env = {k: v for k, v in os.environ.items() if k not in RENDEZVOUS_VARIABLES}
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), *overrides], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for role in ("solver", "verifier"):
        assert f"rollout/{role}/local_reward" in done.stdout
    checkpoint = tmp_path / "checkpoints" / "global_step_1"
    initial = AutoModelForCausalLM.from_pretrained(tiny_model_path).state_dict()
    for role in ("solver", "verifier"):
        trained = AutoModelForCausalLM.from_pretrained(checkpoint / f"policy_{role}" / "huggingface").state_dict()
        assert any(not torch.equal(trained[k], initial[k]) for k in initial), f"policy {role} did not change"
