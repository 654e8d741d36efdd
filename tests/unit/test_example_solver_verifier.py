"""The Solver–Verifier workflow of examples/solver_verifier.py: selected by name, its Verifier's
`agree` adopts the Solver answer it was shown, agreement ends the episode, the Verifier submits."""

import importlib.util
from pathlib import Path

import pytest

from verl_masopd.config import compose_config
from verl_masopd.config.estimator import validate_estimator_config
from verl_masopd.workflows import make_workflow, workflow_kind
from verl_masopd.workflows.problem import Problem

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "solver_verifier.py"
PROBLEM = Problem(uid="p", domain="math", statement="What is 3 + 4?", answer="7")


@pytest.fixture(scope="module")
def workflow():
    spec = importlib.util.spec_from_file_location("solver_verifier", EXAMPLE)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # registers the workflow
    return make_workflow("solver_verifier", "math", horizon=3)


def play(workflow, episode, solver: str, verifier: str):
    actions = {a.name: workflow.parse(a, solver if a.role == "solver" else verifier) for a in workflow.agents}
    return workflow.step(episode, actions)


def test_agree_adopts_the_shown_answer_and_ends_the_episode(workflow):
    episode = workflow.reset(PROBLEM)
    first = play(workflow, episode, "#### 8", "agree")  # turn 0: no Solver answer shown yet
    assert not first.agreed and first.verifier["agents"]["verifier_0"].answer is None
    shown = workflow.render(episode, workflow.agents[1], 1)[1]["content"]  # the Verifier sees the Solver's answer
    assert "## Latest output of solver_0\n#### 8" in shown
    second = play(workflow, episode, "#### 7", "I disagree.\n#### 7")
    assert second.agreed and episode.done and len(episode.turns) == 2
    judgement = workflow.judge(episode)
    assert (judgement.correct, judgement.team, judgement.submission) == (True, 1.0, "7")
    # turn 0: the Solver's answer is formatted but wrong (0.2), the Verifier's `agree` had nothing to adopt (0)
    assert [judgement.local[0, n].value for n in ("solver_0", "verifier_0")] == pytest.approx([0.2, 0.0])


def test_agree_with_a_wrong_answer_is_agreement_on_a_wrong_submission(workflow):
    episode = workflow.reset(PROBLEM)
    play(workflow, episode, "#### 8", "#### 7")
    second = play(workflow, episode, "#### 8", "agree")
    assert second.agreed and second.verifier["agents"]["verifier_0"].answer == "8"
    assert workflow.judge(episode).team == 0.0
    assert workflow.attribute(episode, 0).decisions == {"solver_0": "revise", "verifier_0": "hold"}


def test_estimators_of_multi_agent_workflows_serve_it(workflow):
    assert workflow_kind("solver_verifier", "math") == "mas"
    for estimator in ("grpo", "magrpo", "marft"):
        cfg = compose_config(["preset=cpu", "workflow.name=solver_verifier", "workflow.domain=math"])
        cfg.algorithm.adv_estimator = estimator
        assert validate_estimator_config(cfg).name == estimator
