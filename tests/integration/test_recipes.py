"""The recipes: a missing model stops with the variable's name, every baseline recipe's command line
composes into a config the trainer accepts with the baseline's keys, and the CPU mode trains."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from safetensors.torch import load_file

from verl_masopd.config import compose_config
from verl_masopd.config.run import build_workflow
from verl_masopd.config.validate import validate_config
from verl_masopd.engine.policy_engine import RENDEZVOUS_VARIABLES

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RECIPE_VARIABLES = (
    "MASOPD_PRESET",
    "MASOPD_PROMPT_STYLE",
    "MASOPD_TINY_MODELS",
    "STUDENT_MODEL",
    "TEACHER_MODEL",
    "TRAIN_FILES",
    "VAL_FILES",
    "MASOPD_CPU",
    "MASOPD_CACHE",
    "PYTHON",
    "DOMAIN",
    "TEACHER_SOURCE",
)

# recipe -> (estimator, workflow name, domain, horizon, policy sharing, tree sampling)
BASELINES = {
    "grpo": ("grpo", "mas", "code", 4, "role", False),
    "magrpo": ("magrpo", "mas", "code", 4, "role", False),
    "marft": ("marft", "mas", "code", 4, "role", False),
    "opd": ("opd", "mas", "code", 4, "role", False),
    "cure": ("cure", "mas", "code", 4, "shared", False),
    "at_grpo": ("at_grpo", "mas", "code", 4, "role", True),
    "sa_st_grpo": ("grpo", "sa", "code", 1, "role", False),
    "sa_mt_grpo": ("grpo", "sa", "code", 4, "role", False),
}


def recipe(script: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    # a local engine of this test process leaves torch.distributed's rendezvous variables behind
    clean = {k: v for k, v in os.environ.items() if k not in RECIPE_VARIABLES + RENDEZVOUS_VARIABLES}
    return subprocess.run(
        ["bash", str(ROOT / "recipes" / script), *args],
        env={**clean, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_unset_student_model_is_named():
    result = recipe("masopd_code.sh")
    assert result.returncode == 2
    assert "set STUDENT_MODEL" in result.stderr


def test_missing_paths_are_named(tiny_model_path, tmp_path):
    missing = str(tmp_path / "nowhere")
    result = recipe("masopd_math.sh", STUDENT_MODEL=missing, TRAIN_FILES="x.parquet")
    assert result.returncode == 2
    assert f"STUDENT_MODEL: {missing} is not a folder" in result.stderr

    result = recipe("masopd_math.sh", STUDENT_MODEL=tiny_model_path, TRAIN_FILES=missing)
    assert result.returncode == 2
    assert f"TRAIN_FILES: {missing} does not exist" in result.stderr


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_baseline_recipe_composes_its_estimator(name, tiny_model_path, tiny_teacher_path, builtin_data, tmp_path):
    """The recipe's trainer arguments, captured by a stand-in interpreter, compose and validate."""
    captured = tmp_path / "argv"
    interpreter = tmp_path / "capture"
    interpreter.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {captured}\n")
    interpreter.chmod(0o755)
    result = recipe(
        f"baselines/{name}.sh",
        "data.train_batch_size=8",
        PYTHON=str(interpreter),
        STUDENT_MODEL=tiny_model_path,
        TEACHER_MODEL=tiny_teacher_path,
        TRAIN_FILES=builtin_data["code"],
        VAL_FILES=builtin_data["math"],
    )
    assert result.returncode == 0, result.stderr
    argv = captured.read_text().splitlines()
    assert argv[:2] == ["-m", "verl_masopd.train"]

    cfg = compose_config(argv[2:])
    run = validate_config(cfg)
    estimator, workflow, domain, horizon, sharing, tree = BASELINES[name]
    assert (
        run.estimator.name,
        run.workflow.name,
        run.workflow.domain,
        run.workflow.horizon,
        run.workflow.policy_sharing,
        run.rollout.tree_sampling,
    ) == (estimator, workflow, domain, horizon, sharing, tree)
    assert run.pac.enable == (name != "opd")  # plain role-conditioned OPD has no privileged block
    assert run.students.path == tiny_model_path
    assert run.teacher.model_path == tiny_teacher_path
    assert run.train_files == (builtin_data["code"],)
    assert run.val_files == (builtin_data["math"],)
    assert cfg.data.train_batch_size == 8  # overrides after the recipe's own pass through
    assert cfg.data.max_response_length == 4096  # the paper's settings, not the CPU preset's


@pytest.mark.parametrize(
    ("script", "source", "teacher_model"),
    [("masopd_math.sh", "live", False), ("baselines/opd.sh", "frozen", True), ("masopd_math.sh", "path", True)],
)
def test_a_self_distillation_recipe_needs_no_teacher_model(
    script, source, teacher_model, tiny_model_path, tiny_teacher_path, builtin_data, tmp_path
):
    """TEACHER_SOURCE=frozen|live: the policies are their own teachers, TEACHER_MODEL unset or not read."""
    captured = tmp_path / "argv"
    interpreter = tmp_path / "capture"
    interpreter.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {captured}\n")
    interpreter.chmod(0o755)
    env = {"TEACHER_MODEL": tiny_teacher_path} if teacher_model else {}
    result = recipe(
        script,
        "teacher.privileged=reference",
        PYTHON=str(interpreter),
        STUDENT_MODEL=tiny_model_path,
        TRAIN_FILES=builtin_data["math"],
        TEACHER_SOURCE=source,
        DOMAIN="math",
        **env,
    )
    assert result.returncode == 0, result.stderr
    run = validate_config(compose_config(captured.read_text().splitlines()[2:]))
    assert (run.teacher.source, run.teacher.privileged) == (source, "reference")
    assert run.teacher.model_path == (tiny_teacher_path if source == "path" else None)
    assert run.estimator.name == ("opd" if script == "baselines/opd.sh" else "masopd")


def test_cpu_mode_trains_one_step(tiny_model_path, tiny_teacher_path, tmp_path):
    """MASOPD_CPU=1 with the test's cached models: the recipe writes the tiny world's math problems into
    its cache (512 training problems, 400 held out, disjoint) and one MAS-OPD step with the compact
    prompts changes both policies."""
    cache, checkpoints = tmp_path / "cache", tmp_path / "checkpoints"
    result = recipe(
        "masopd_math.sh",
        "trainer.total_training_steps=1",
        "workflow.horizon=1",
        "data.max_response_length=16",
        "data.train_batch_size=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        f"trainer.default_local_dir={checkpoints}",
        "trainer.logger=[console]",
        f"hydra.run.dir={tmp_path / 'hydra'}",
        MASOPD_CPU="1",
        MASOPD_CACHE=str(cache),
        STUDENT_MODEL=tiny_model_path,
        TEACHER_MODEL=tiny_teacher_path,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    train = pd.read_parquet(cache / "data" / "tiny_math_train512.parquet")
    heldout = pd.read_parquet(cache / "data" / "tiny_math_heldout400.parquet")
    assert (len(train), len(heldout)) == (512, 400)
    assert not set(train.extra_info.map(lambda e: e["id"])) & set(heldout.extra_info.map(lambda e: e["id"]))
    assert not (cache / "models").exists()

    assert (checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    assert yaml.safe_load((checkpoints / "global_step_1" / "config.yaml").read_text())["workflow"]["prompt_style"] == (
        "compact"
    )
    initial = load_file(Path(tiny_model_path) / "model.safetensors")
    for policy in ("reasoner", "tool_user"):
        trained = load_file(checkpoints / "global_step_1" / f"policy_{policy}" / "huggingface" / "model.safetensors")
        assert set(trained) == set(initial)
        assert any(not torch.equal(trained[k], initial[k]) for k in initial), f"{policy} did not change"


def trainer_argv(tmp_path, **env: str) -> tuple[list[str], str]:
    """The CPU mode's trainer arguments, captured by an interpreter that runs everything else
    (recipes/tiny_world.py) with this Python, and the recipe's stderr."""
    captured, interpreter = tmp_path / "argv", tmp_path / "python"
    interpreter.write_text(
        f'#!/bin/sh\nif [ "$1" = -m ]; then printf "%s\\n" "$@" > {captured}; else exec {sys.executable} "$@"; fi\n'
    )
    interpreter.chmod(0o755)
    result = recipe(
        "masopd_math.sh", PYTHON=str(interpreter), MASOPD_CPU="1", MASOPD_CACHE=str(tmp_path / "cache"), **env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return captured.read_text().splitlines(), result.stderr


def test_cpu_mode_keeps_a_real_models_settings_and_names_its_preset(smollm2_path, tmp_path):
    argv, stderr = trainer_argv(tmp_path, STUDENT_MODEL=smollm2_path, TEACHER_MODEL=smollm2_path)
    assert "preset=small_cpu" in argv and not any(a.startswith("workflow.prompt_style=") for a in argv)
    assert "recipes/masopd.sh: CPU mode, preset=small_cpu (STUDENT_MODEL is not a tiny-world model" in stderr
    cfg = compose_config(argv[2:])
    assert (cfg.workflow.prompt_style, cfg.data.max_response_length, cfg.actor_rollout_ref.actor.optim.lr) == (
        "paper",
        256,
        5e-6,
    )
    argv, stderr = trainer_argv(
        tmp_path, STUDENT_MODEL=smollm2_path, TEACHER_SOURCE="frozen", MASOPD_PRESET="cpu", MASOPD_PROMPT_STYLE="paper"
    )
    assert "preset=cpu" in argv and "workflow.prompt_style=paper" in argv
    assert "CPU mode, preset=cpu (MASOPD_PRESET)" in stderr


def test_cpu_mode_keeps_the_tiny_worlds_preset_for_tiny_models(tiny_model_path, tmp_path):
    argv, stderr = trainer_argv(tmp_path, STUDENT_MODEL=tiny_model_path)
    assert "preset=tiny_world" in argv and "workflow.prompt_style=compact" in argv
    assert "CPU mode, preset=tiny_world (a tiny-world student)" in stderr


# search recipe -> (system, horizon, teacher model, {role: (estimator, group_by)})
SEARCH = {
    "multiagent_opd.sh": (
        "hierarchical",
        8,
        "teacher",
        {"searcher": ("opd", "problem"), "leader": ("grpo", "problem"), "answerer": ("grpo", "episode")},
    ),
    "search/teacher.sh": (
        "cascaded",
        2,
        "teacher",
        {"searcher": ("grpo", "problem"), "leader": ("grpo", "problem"), "answerer": ("grpo", "episode")},
    ),
    "search/searcher_grpo.sh": (
        "hierarchical",
        8,
        "teacher",
        {"searcher": ("grpo", "problem"), "leader": ("grpo", "problem"), "answerer": ("grpo", "episode")},
    ),
    "search/base_teacher.sh": (
        "hierarchical",
        8,
        "student",
        {"searcher": ("opd", "problem"), "leader": ("grpo", "problem"), "answerer": ("grpo", "episode")},
    ),
    "search/prompted_critic.sh": (
        "hierarchical",
        8,
        "teacher",
        {"searcher": ("judge_grpo", "problem"), "leader": ("grpo", "problem"), "answerer": ("grpo", "episode")},
    ),
    "search/searchers_no_loss.sh": (
        "hierarchical",
        8,
        "teacher",
        {"searcher": ("frozen", "problem"), "leader": ("grpo", "problem"), "answerer": ("grpo", "episode")},
    ),
}


def test_the_search_recipe_needs_a_retriever(tiny_model_path, builtin_data):
    result = recipe("multiagent_opd.sh", STUDENT_MODEL=tiny_model_path, TRAIN_FILES=builtin_data["math"])
    assert result.returncode == 2
    assert "set RETRIEVER" in result.stderr


@pytest.mark.parametrize("name", sorted(SEARCH))
def test_search_recipe_composes_its_roles(name, toy_search_index, tiny_model_path, tiny_teacher_path, tmp_path):
    """The recipe's trainer arguments compose into the search workflow with each role's estimator."""
    from data_prep.schema import qa_row
    from data_prep.writer import write_rows

    train = tmp_path / "qa.parquet"
    write_rows([qa_row(data_source="nq", uid="q0", split="train", question="q?", answers=["a"], metadata={})], train)
    captured, interpreter = tmp_path / "argv", tmp_path / "capture"
    interpreter.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {captured}\n")
    interpreter.chmod(0o755)
    result = recipe(
        name,
        "data.train_batch_size=8",
        PYTHON=str(interpreter),
        STUDENT_MODEL=tiny_model_path,
        TEACHER_MODEL=tiny_teacher_path,
        TRAIN_FILES=str(train),
        RETRIEVER=toy_search_index,
    )
    assert result.returncode == 0, result.stderr
    run = validate_config(compose_config(captured.read_text().splitlines()[2:]))
    system, horizon, teacher, roles = SEARCH[name]
    assert (run.workflow.name, run.workflow.domain, run.workflow.horizon, run.workflow.policy_sharing) == (
        "search",
        "qa",
        horizon,
        "shared",
    )
    workflow = build_workflow(run.workflow)
    assert workflow.system == system and workflow.search_tool.max_calls == 3
    assert run.teacher.model_path == {"teacher": tiny_teacher_path, "student": tiny_model_path}[teacher]
    chosen = {role: run.estimator.role_estimator(role) for role in roles}
    assert {role: (e.settings.name, e.group_by) for role, e in chosen.items()} == roles
    assert run.policies == ("shared",)


@pytest.mark.parametrize("name", ["multiagent_opd.sh", "search/prompted_critic.sh"])
def test_cpu_mode_trains_the_search_team_on_the_tiny_search_world(name, tmp_path):
    """MASOPD_CPU=1 on the search recipes: the shipped search student and teacher, the search world's
    questions and BM25 index written into the cache, its budgets (preset=tiny_search); two steps
    with real searches change the one shared policy."""
    checkpoints = tmp_path / "checkpoints"
    result = recipe(
        name,
        "trainer.total_training_steps=2",
        "data.train_batch_size=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        f"trainer.default_local_dir={checkpoints}",
        "trainer.logger=[console]",
        f"hydra.run.dir={tmp_path / 'hydra'}",
        MASOPD_CPU="1",
        MASOPD_CACHE=str(tmp_path / "cache"),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    config = yaml.safe_load((checkpoints / "global_step_2" / "config.yaml").read_text())
    assert config["workflow"]["horizon"] == 6 and config["workflow"]["options"]["max_calls"] == 2
    assert "tool_calls" in result.stdout + result.stderr
    student = Path(config["students"]["path"])
    assert student.parent.name == "search"  # the shipped search student
    initial = load_file(student / "model.safetensors")
    trained = load_file(checkpoints / "global_step_2" / "policy_shared" / "huggingface" / "model.safetensors")
    assert any(not torch.equal(trained[k], initial[k]) for k in initial)


@pytest.fixture
def own_model(tiny_model_path, tmp_path) -> str:
    """A model of one's own: the tiny student's weights with a tokenizer the tiny world's lacks."""
    import shutil

    from transformers import AutoTokenizer

    folder = tmp_path / "own_model"
    shutil.copytree(tiny_model_path, folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.add_tokens(["<own>"])
    tokenizer.save_pretrained(folder)
    return str(folder)


def cpu_recipe(tmp_path, script: str, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, list[str] | None]:
    """A recipe in CPU mode with an interpreter that captures the trainer's arguments (None: the
    trainer never started) and runs everything else with this Python."""
    captured, interpreter = tmp_path / "argv", tmp_path / "python"
    captured.unlink(missing_ok=True)
    interpreter.write_text(
        f'#!/bin/sh\nif [ "$1" = -m ]; then printf "%s\\n" "$@" > {captured}; else exec {sys.executable} "$@"; fi\n'
    )
    interpreter.chmod(0o755)
    result = recipe(script, *args, PYTHON=str(interpreter), MASOPD_CPU="1", MASOPD_CACHE=str(tmp_path / "cache"), **env)
    return result, captured.read_text().splitlines() if captured.exists() else None


ASKS_FOR_A_TEACHER = (
    "recipes/masopd.sh: STUDENT_MODEL is your own model, whose tokenizer the tiny world's teacher does not share: "
    "set TEACHER_MODEL (a teacher with your model's tokenizer) or TEACHER_SOURCE=frozen|live\n"
)


@pytest.mark.parametrize(
    ("script", "by_override"),
    [("masopd_math.sh", False), ("masopd_math.sh", True), ("baselines/opd.sh", False), ("multiagent_opd.sh", False)],
)
def test_cpu_mode_with_ones_own_student_and_no_teacher_stops_before_the_trainer(
    script, by_override, own_model, tmp_path
):
    """The tiny world's teacher is not taken for a student of one's own (named by STUDENT_MODEL or
    students.path=) when a teacher is needed: one line, exit 2, no trainer started."""
    student = (f"students.path={own_model}",) if by_override else ()
    env = {} if by_override else {"STUDENT_MODEL": own_model}
    result, argv = cpu_recipe(tmp_path, script, *student, DOMAIN="math", **env)
    assert (result.returncode, argv, result.stderr) == (2, None, ASKS_FOR_A_TEACHER)


@pytest.mark.parametrize(
    ("script", "args", "env", "source", "estimator"),
    [
        ("masopd_math.sh", ("teacher.source=frozen",), {}, "frozen", "masopd"),
        ("masopd_math.sh", ("++teacher.source=live",), {"TEACHER_MODEL": "/nowhere"}, "live", "masopd"),
        ("masopd_math.sh", (), {"TEACHER_SOURCE": "frozen"}, "frozen", "masopd"),
        ("baselines/grpo.sh", (), {}, "path", "grpo"),
        ("baselines/magrpo.sh", (), {}, "path", "magrpo"),
        ("baselines/marft.sh", (), {}, "path", "marft"),
        ("baselines/at_grpo.sh", (), {}, "path", "at_grpo"),
        ("baselines/cure.sh", (), {"DOMAIN": "code"}, "path", "cure"),
    ],
)
def test_cpu_mode_with_ones_own_student_runs_what_needs_no_teacher_model(
    script, args, env, source, estimator, own_model, tmp_path
):
    """Self-distillation (TEACHER_SOURCE or the teacher.source= override, a TEACHER_MODEL then
    unread) and the baselines without a teacher start with one's own student and no teacher model."""
    result, argv = cpu_recipe(tmp_path, script, *args, STUDENT_MODEL=own_model, **{"DOMAIN": "math", **env})
    assert result.returncode == 0, result.stderr[-3000:]
    assert not any(a.startswith("teacher.model_path=") for a in argv)
    run = validate_config(compose_config(argv[2:]))
    assert (run.estimator.name, run.teacher.source, run.teacher.model_path) == (estimator, source, None)
    assert run.students.path == own_model and "preset=small_cpu" in argv


def test_cpu_mode_with_ones_own_teacher_needs_ones_own_student(own_model, tiny_teacher_path, tmp_path):
    """The tiny student is not taken for a teacher of one's own (TEACHER_MODEL or the override) that
    lacks its tokenizer; a teacher with the tiny tokenizer keeps the tiny world's student."""
    for args, env in (((), {"TEACHER_MODEL": own_model}), ((f"teacher.model_path={own_model}",), {})):
        result, argv = cpu_recipe(tmp_path, "masopd_math.sh", *args, **env)
        assert (result.returncode, argv) == (2, None)
        assert result.stderr == (
            f"recipes/masopd.sh: TEACHER_MODEL: {own_model} does not have the tiny world's tokenizer: "
            "set STUDENT_MODEL to its student\n"
        )
    result, argv = cpu_recipe(tmp_path, "masopd_math.sh", TEACHER_MODEL=tiny_teacher_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"teacher.model_path={tiny_teacher_path}" in argv and "preset=tiny_world" in argv
