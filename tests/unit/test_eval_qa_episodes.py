"""Played search episodes as QA attempts, on hand-made episodes: the search workflow's `qa_scores`
(the submitted candidate's scores, "no_candidate" without an Answerer), and the tokens generated and
read counted call by call; a workflow without `qa_attempts` scores none."""

import pytest

from verl_masopd.eval.qa_attempts import QaAttempt, read_attempts, write_attempts
from verl_masopd.eval.qa_episodes import episode_tokens, group_attempts
from verl_masopd.rollout.records import STOP, EpisodeResult, RolloutGroup, Sample
from verl_masopd.workflows import make_workflow
from verl_masopd.workflows.base import Action, Agent, Episode, Judgement, QaScores, Turn
from verl_masopd.workflows.problem import Problem
from verl_masopd.workflows.search import HANDOVER, NO_CANDIDATE, LeaderEvidence, answer_evidence

PROBLEM = Problem(uid="q7", domain="qa", statement="Which river?", answers=("Tol",), data_source="hop")
LEADER, ANSWERERS = Agent("leader_0", "leader", 0), [Agent(f"answerer_{i}", "answerer", i) for i in range(2)]


def sample(agent: Agent, turn: int, context: int, generated: list[int]) -> Sample:
    """A call with `context` context tokens and a reply whose token i the policy sampled where
    generated[i] is 1 (0: a tool observation's token)."""
    n = len(generated)
    seat = (agent.name, agent.role, agent.index, agent.role)
    return Sample("e", 0, turn, *seat, [5] * context, [7] * n, [0.0] * n, STOP, generated=generated)


def leader_turn(decision: str) -> Turn:
    evidence = LeaderEvidence(None, decision)
    return Turn(0, {LEADER.name: Action(LEADER, "")}, "", False, {"agents": {LEADER.name: evidence}})


def result(turns: list[Turn], samples: list[Sample]) -> EpisodeResult:
    episode = Episode(PROBLEM, (LEADER, *ANSWERERS), turns, done=True)
    return EpisodeResult("e", episode, samples, Judgement(False, 0.0, None), 0)


def answered(replies: list[str]) -> EpisodeResult:
    """The Leader hands over at once; the Answerers reply `replies`."""
    parsed = [{"answer": text[8:-9]} if text.startswith("<answer>") else {} for text in replies]
    actions = {a.name: Action(a, text, fields) for a, text, fields in zip(ANSWERERS, replies, parsed, strict=True)}
    evidence = {name: answer_evidence(action, PROBLEM.answers) for name, action in actions.items()}
    turns = [leader_turn(HANDOVER), Turn(1, actions, "", False, {"agents": evidence, "next": ()})]
    samples = [sample(LEADER, 0, 30, [1] * 4), *(sample(a, 1, 40, [1] * 6) for a in ANSWERERS)]
    return result(turns, samples)


def test_tokens_generated_and_read_over_every_call():
    # a Searcher's reply: 3 query tokens, a 5-token observation, 2 summary tokens
    searcher = sample(Agent("searcher_0", "searcher", 0), 1, 12, [1, 1, 1, 0, 0, 0, 0, 0, 1, 1])
    played = result([], [sample(LEADER, 0, 20, [1] * 4), searcher, sample(LEADER, 2, 33, [1] * 3)])
    # generated: 4 + 5 + 3; read: the three contexts and the observation's 5 tokens
    assert episode_tokens(played) == (12, 20 + 12 + 33 + 5)
    assert episode_tokens(result([], [])) == (0, 0)


@pytest.fixture
def search(toy_search_index):
    return make_workflow("search", "qa", 1, 8, retriever=toy_search_index)


def test_the_submitted_candidate_scores_the_attempt(search):
    right, wrong_first = (
        answered(["<answer>the Tol</answer>", "Mir"]),
        answered(["The answer is Tol", "<answer>Tol</answer>"]),
    )
    ended = result([leader_turn(NO_CANDIDATE)], [sample(LEADER, 0, 30, [1] * 8)])
    group = RolloutGroup(PROBLEM, [right, wrong_first, ended])
    assert search.qa_attempts
    assert search.qa_scores(ended.episode) == QaScores(False, False, False, NO_CANDIDATE)
    assert group_attempts(group, search) == [
        QaAttempt("hop", "q7", 0, True, True, True, None, 4 + 12, 30 + 80),
        # candidate 0 is submitted: untagged, read by relaxed EM only; candidate 1 does not count
        QaAttempt("hop", "q7", 1, False, False, True, "untagged", 4 + 12, 30 + 80),
        QaAttempt("hop", "q7", 2, False, False, False, NO_CANDIDATE, 8, 30),
    ]


def test_attempts_round_trip_through_their_json_lines(tmp_path, search):
    attempts = group_attempts(RolloutGroup(PROBLEM, [answered(["<answer></answer>", "Mir"])]), search)
    assert attempts[0].failure == "empty_candidate"
    write_attempts(attempts, tmp_path / "qa_attempts.jsonl")
    assert read_attempts(tmp_path / "qa_attempts.jsonl") == attempts


def test_a_workflow_without_qa_attempts_scores_none():
    math = make_workflow("mas", "math", 1, 2)
    assert not math.qa_attempts
    with pytest.raises(NotImplementedError, match="workflow 'mas' does not score QA attempts"):
        math.qa_scores(Episode(PROBLEM, math.agents))
