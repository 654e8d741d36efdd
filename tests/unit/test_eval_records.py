"""Episode records of a real math episode (real sandbox, real math-verify) carry the parsed
outputs the collaboration metrics compare."""

import json

from verl_masopd.eval.__main__ import record_line
from verl_masopd.rollout.evaluation import episode_record
from verl_masopd.rollout.records import EpisodeResult
from verl_masopd.rollout.summary import summarize
from verl_masopd.workflows import make_workflow
from verl_masopd.workflows.problem import Problem

PROBLEM = Problem(uid="half", domain="math", statement="What is 3 divided by 6?", answer="\\frac{1}{2}")


def test_record_of_conflict_then_agreement():
    workflow = make_workflow("mas", "math", timeout=10.0)
    episode = workflow.reset(PROBLEM)
    turns = [
        {"reasoner_0": "3/6 halves.\n#### 1/2", "tool_user_0": "```python\nprint(6 / 3)\n```"},
        {"reasoner_0": "I keep my answer.\n#### 1/2", "tool_user_0": "```python\nprint(3 / 6)\n```"},
    ]
    for texts in turns:
        workflow.step(episode, {a.name: workflow.parse(a, texts[a.name]) for a in workflow.agents})
    result = EpisodeResult("e0", episode, [], workflow.judge(episode), 0)

    record = json.loads(record_line(episode_record(workflow, result)))

    assert record["agents"] == {
        "reasoner_0": {"role": "reasoner", "index": 0},
        "tool_user_0": {"role": "tool_user", "index": 0},
    }
    first, second = record["turns"]
    assert first["parsed"] == {"reasoner_0": {"answer": "1/2"}, "tool_user_0": {"code": "print(6 / 3)"}}
    assert second["parsed"] == {"reasoner_0": {"answer": "1/2"}, "tool_user_0": {"code": "print(3 / 6)"}}
    assert first["verdicts"] == {"reasoner_0": True, "tool_user_0": False}
    # each agent's typed evidence is written as the object of its fields
    assert first["verifier"]["agents"]["reasoner_0"] == {
        "verdict": True,
        "answer": "1/2",
        "correct": True,
        "reason": None,
    }
    assert first["verifier"]["agents"]["tool_user_0"] == {
        "verdict": False,
        "run": True,
        "output": "2.0\n",
        "failure": None,
        "answer": "2.0",
        "correct": False,
    }
    assert not first["agreed"] and second["agreed"] and second["verdicts"] is None
    row = summarize([{"episodes": [record]}], horizon=4)
    # The reasoner reworded its text but held its answer; the tool user revised its program.
    assert row["hold_rate_correct"] == 1.0 and row["revise_rate_at_fault"] == 1.0
    assert row["agreed_share"] == 1.0 and row["turns_to_agreement"] == 2.0
