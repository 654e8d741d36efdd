"""The evaluation reads a training checkpoint's run configuration; command-line flags override it."""

from argparse import Namespace

import pytest

from verl_masopd.config import compose_config
from verl_masopd.eval.run_config import DEFAULTS, RUN_KEYS, policy_model, resolve_run_arguments
from verl_masopd.trainer.checkpoint import TrainerState, save_checkpoint

RUN = ("workflow.horizon=3", "workflow.policy_sharing=shared", "workflow.prompt_style=compact", "workflow.name=sa")


def saved_run(root, step, *overrides):
    cfg = compose_config(
        ["preset=cpu", "workflow.domain=math", "students.path=/s", "teacher.model_path=/t", *overrides]
    )
    return save_checkpoint(root, TrainerState(step, {}, "hash"), cfg, {})


def unset(**given) -> Namespace:
    return Namespace(**{**dict.fromkeys(RUN_KEYS), **given})


def test_a_checkpoint_root_stands_for_its_newest_checkpoint_and_flags_override(tmp_path):
    saved_run(tmp_path, 1)
    newest = saved_run(tmp_path, 2, *RUN, "data.max_response_length=24", "workflow.context_layout=role_last")
    args = unset(checkpoint=str(tmp_path))
    args.horizon = 5
    assert resolve_run_arguments(args) == newest
    assert args.checkpoint == str(newest.resolve())
    assert (args.workflow, args.horizon, args.policy_sharing, args.prompt_style) == ("sa", 5, "shared", "compact")
    assert (args.max_new_tokens, args.context_layout, args.agents_per_role) == (24, "role_last", 1)
    assert policy_model(newest, "shared") == str(newest / "policy_shared" / "huggingface")


def test_without_a_checkpoint_the_defaults_apply(tmp_path):
    args = unset(checkpoint=None, prompt_style="compact")
    assert resolve_run_arguments(args) is None
    assert {arg: getattr(args, arg) for arg in RUN_KEYS} == {**DEFAULTS, "prompt_style": "compact"}


def test_a_folder_without_checkpoints_is_named(tmp_path):
    with pytest.raises(ValueError, match=f"--checkpoint {tmp_path}: neither a checkpoint"):
        resolve_run_arguments(unset(checkpoint=str(tmp_path)))
