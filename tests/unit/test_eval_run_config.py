"""The evaluation reads a training checkpoint's run configuration; command-line flags override it."""

import re
from argparse import Namespace

import pytest

from verl_masopd.config import compose_config
from verl_masopd.eval.run_config import DEFAULTS, RUN_KEYS, option_values, policy_model, resolve_run_arguments
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


def test_workflow_options_merge_key_by_key_over_the_checkpoints(tmp_path):
    saved_run(tmp_path, 1, "+workflow.options.shown_chars=500", "+workflow.options.float_tol=0.01")
    args = unset(
        checkpoint=str(tmp_path), workflow_options=["shown_chars=80", "reward_weights={reasoner: {answer: 2}}"]
    )
    resolve_run_arguments(args)
    assert args.workflow_options == {
        "shown_chars": 80,
        "float_tol": 0.01,
        "reward_weights": {"reasoner": {"answer": 2}},
    }
    args = unset(checkpoint=None)
    resolve_run_arguments(args)
    assert args.workflow_options == {}


def test_option_values_are_yaml():
    assert option_values(["retriever=/data/index", "retriever=http://localhost:8000/retrieve", "system=cascaded"]) == {
        "retriever": "http://localhost:8000/retrieve",
        "system": "cascaded",
    }
    assert option_values(["max_waves=2", "search_timeout_s=0.5", "tags={search: query}", "x="]) == {
        "max_waves": 2,
        "search_timeout_s": 0.5,
        "tags": {"search": "query"},
        "x": None,
    }


@pytest.mark.parametrize(
    "item, message",
    [
        ("max_waves", "--workflow-option 'max_waves': expected KEY=VALUE"),
        ("=3", "--workflow-option '=3': expected KEY=VALUE"),
        ("tags={search: [", "--workflow-option 'tags={search: [': not a YAML value"),
        ("prompt_style=compact", "--workflow-option 'prompt_style=compact': the prompt style is --prompt-style"),
    ],
)
def test_a_bad_option_is_named(item, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        option_values([item])


def test_a_search_run_s_options_travel_with_its_checkpoint(tmp_path, retrieval_index):
    """The retriever and the waves of a search run come back from its checkpoint; one option given
    on the command line replaces the saved one."""
    cfg = compose_config(
        ["preset=cpu", "students.path=/s", "teacher.model_path=/t", "workflow.name=search", "workflow.domain=qa",
         "workflow.horizon=4", f"+workflow.options.retriever={retrieval_index}", "+workflow.options.max_waves=1",
         "+workflow.options.answer_candidates=2"]
    )  # fmt: skip
    save_checkpoint(tmp_path, TrainerState(3, {}, "hash"), cfg, {})
    args = unset(checkpoint=str(tmp_path), workflow_options=["answer_candidates=4"])
    resolve_run_arguments(args)
    assert (args.workflow, args.horizon) == ("search", 4)
    assert args.workflow_options == {"retriever": str(retrieval_index), "max_waves": 1, "answer_candidates": 4}
