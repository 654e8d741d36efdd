"""recipes/real_model_demo.sh and benchmarks/real_model_learning.py name what exists: the demo's
commands (scripts, `python -m` modules, Hydra keys and presets, as test_readme_commands checks the
docs), and the training configurations both build pass the trainer's own start-up validation."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest

from data_prep.writer import write_rows
from verl_masopd.config import compose_config
from verl_masopd.config.validate import validate_config
from verl_masopd.tiny_world.math_tasks import math_rows

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_readme_commands import problems, shell_commands  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "recipes" / "real_model_demo.sh"
SETTINGS = ROOT / "benchmarks" / "results" / "real_model_learning" / "settings.json"
sys.path.insert(0, str(ROOT / "benchmarks"))
import real_model_learning  # noqa: E402


@pytest.fixture
def train_file(tmp_path) -> str:
    """A training file of the ladder's first two problems."""
    write_rows(math_rows(0, 2, "train"), tmp_path / "train.parquet")
    return str(tmp_path / "train.parquet")


def demo_commands() -> list[str]:
    return shell_commands(f"```bash\n{DEMO.read_text()}\n```\n")


def test_the_demo_names_existing_scripts_modules_and_keys():
    cfg = compose_config(["students.path=/models/student", "data.train_files=[/data/train.parquet]"])
    found = problems(f"```bash\n{DEMO.read_text()}\n```\n", cfg)
    assert [p for p in found if not p.endswith("no key hydra.run.dir in the training config")] == []  # Hydra's own
    modules = {w for c in demo_commands() for w in re.findall(r"-m ([\w.]+)", c)}
    assert modules == {"verl_masopd.models", "verl_masopd.eval", "verl_masopd.train", "verl_masopd.tiny_world.report"}


def test_the_demo_training_run_passes_start_up_validation(tmp_path, tiny_model_path, train_file):
    [command] = [c for c in demo_commands() if "-m verl_masopd.train" in c]
    script = DEMO.read_text()
    [horizon] = re.findall(r"^horizon=(\d+)$", script, re.M)
    [max_new_tokens] = re.findall(r"^max_new_tokens=(\d+)$", script, re.M)
    [steps] = re.findall(r"\$\{DEMO_STEPS:-(\d+)\}", script)
    values = {
        "$model": tiny_model_path,
        "$train": train_file,
        "$run": str(tmp_path),
        "$horizon": horizon,
        "$max_new_tokens": max_new_tokens,
        f"${{DEMO_STEPS:-{steps}}}": steps,
    }
    words = shlex.split(command)
    overrides = [w for w in words[words.index("verl_masopd.train") + 1 :] if "=" in w]
    for name, value in values.items():
        overrides = [o.replace(name, value) for o in overrides]
    assert not [o for o in overrides if "$" in o]
    cfg = compose_config(overrides)
    run = validate_config(cfg)
    assert (cfg.teacher.source, cfg.teacher.privileged, cfg.actor_rollout_ref.model.lora_rank) == (
        "frozen",
        "reference",
        16,
    )
    assert run is not None and cfg.algorithm.adv_estimator == "masopd"
    # the demo is the comparison's masopd_self cell (its time, and its table, are one of that cell's)
    settings = json.loads(SETTINGS.read_text())
    w, t = settings["workflow"], settings["training"]
    assert (cfg.workflow.horizon, cfg.data.max_response_length) == (w["horizon"], w["max_new_tokens"])
    assert (cfg.trainer.total_training_steps, cfg.data.train_batch_size, cfg.rollout.group_size) == (
        t["steps"],
        t["batch"],
        t["group_size"],
    )
    assert (cfg.actor_rollout_ref.actor.optim.lr, cfg.actor_rollout_ref.model.lora_alpha) == (t["lr"], t["lora_alpha"])


TRAINED = [name for name, method in json.loads(SETTINGS.read_text())["methods"].items() if method["train"]]


def test_the_comparison_has_the_four_arms():
    assert list(json.loads(SETTINGS.read_text())["methods"]) == ["prompt_only", "mas_grpo", "opd_self", "masopd_self"]
    assert TRAINED == ["mas_grpo", "opd_self", "masopd_self"]


@pytest.mark.parametrize("method", TRAINED)
def test_every_trained_method_of_the_comparison_passes_start_up_validation(
    method, tmp_path, monkeypatch, tiny_model_path, train_file
):
    settings = json.loads(SETTINGS.read_text())
    commands = []
    monkeypatch.setattr(real_model_learning, "run", lambda command, log, env=None: commands.append(command))
    real_model_learning.train(settings["methods"][method], 0, tmp_path, tiny_model_path, train_file, settings)
    [command] = commands
    cfg = compose_config(command[3:])
    validate_config(cfg)
    assert cfg.trainer.total_training_steps == settings["training"]["steps"]
    assert cfg.actor_rollout_ref.model.lora_rank == settings["training"]["lora_rank"]
