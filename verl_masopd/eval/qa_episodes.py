"""The played episodes of a workflow with `qa_attempts` (the search team) as QA attempts
(eval/qa_attempts.py): one `QaAttempt` per episode, the k episodes of a question its attempts 0 … k−1.

The scores (EM, sub-EM, relaxed EM and failure) are the workflow's `qa_scores` of the episode
(the search team: its submitted candidate's). The tokens of an episode, over its calls s (one `Sample` per agent per
turn, its reply's tool observations included), with g_{s,i} = 1 where the policy sampled the
reply's token i and 0 on observation tokens:

    tokens_generated = Σ_s Σ_i g_{s,i}
    tokens_read      = Σ_s ( |u_s| + Σ_i (1 − g_{s,i}) )

|u_s| the context the call was sampled from (`Sample.prompt_ids`): every token the models read
from outside themselves, each once per call (a reply's own generated tokens are not counted as
read, nor is its context again when generation resumes after an observation).
"""

from __future__ import annotations

from verl_masopd.eval.qa_attempts import QaAttempt
from verl_masopd.rollout.records import EpisodeResult, RolloutGroup
from verl_masopd.workflows.base import Workflow


def episode_tokens(result: EpisodeResult) -> tuple[int, int]:
    """(tokens_generated, tokens_read) of one episode (module docstring)."""
    generated = sum(sum(s.generated) for s in result.samples)
    read = sum(len(s.prompt_ids) + len(s.generated) - sum(s.generated) for s in result.samples)
    return generated, read


def group_attempts(group: RolloutGroup, workflow: Workflow) -> list[QaAttempt]:
    """The attempts of one question: its episodes in order, dataset its data_source, question its uid."""
    attempts = []
    for index, result in enumerate(group.episodes):
        scores = workflow.qa_scores(result.episode)
        generated, read = episode_tokens(result)
        attempts.append(
            QaAttempt(
                group.problem.data_source,
                group.uid,
                index,
                scores.em,
                scores.sub_em,
                scores.relaxed_em,
                scores.failure,
                generated,
                read,
            )
        )
    return attempts
