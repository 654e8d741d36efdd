"""Finished episodes -> one verl `DataProto` per policy (fields: see the module's `to_dataproto`).

A row is one agent's response at one turn, in the project's token layout (`verl_masopd.tokens.layout`:
prompts left-padded to the longest kept prompt, responses right-padded to the longest kept
response, each at most its limit); rollout_log_probs ℓS_k on y, 0 on padding. This is the one
place the records (rollout/records.py) become verl's DataProto: the engine boundary.

response_mask is 1 on the tokens the policy generated and 0 on tool observations and padding
(attention_mask is 1 on observations: they are context for the tokens after them). Where the
teacher scored the samples (`Sample.teacher`), teacher_log_probs [B, R] and, with κ ≥ 1
contrasting roles, teacher_contrast_log_probs [B, κ, R] hold its scores (0 where it has none).
Where a judge scored the samples (`Sample.judge`), judge_score [B] holds the scores (0 where
there is none) and the column "judged" says which rows have one. The column "policy_version" is
the weight version of its policy that sampled each row (`Sample.version`).

Truncation rule: contexts arrive already cut to `max_prompt_len` by the rollout (the middle of the
history goes, `verl_masopd.tokens.context`); one that is still longer keeps its LAST `max_prompt_len`
tokens (the generation prompt stays next to the response); a response longer than
`max_response_len` keeps its first `max_response_len` tokens together with their log-probs. Both
are counted in `meta_info` ("truncated_prompts", "truncated_responses"). Failed turns (no
response) carry no tokens to train on and are left out, counted as "failed_samples".

Rows come group by group, episode by episode, sample by sample; meta_info["episode_rows"]
(rollout/episode_rows.py) keeps that structure of the records for the estimators.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from verl import DataProto

from verl_masopd.rollout.episode_rows import EPISODE_ROWS, EpisodeRows
from verl_masopd.rollout.records import FAILED, RolloutGroup, Sample
from verl_masopd.tokens.layout import prompt_response_tensors, right_padded


def column(values: Sequence) -> np.ndarray:
    """A non-tensor batch column: one object per row (a list stays one row's list)."""
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        out[i] = value
    return out


def to_dataproto(
    groups: Sequence[RolloutGroup], policy: str | None, max_prompt_len: int, max_response_len: int, pad_id: int
) -> DataProto:
    """The rows of `policy`'s samples in `groups` (every policy's when None, one joint batch),
    with team/local rewards from each judgement; "uid" is the row's group key.

    team_reward = judgement.team; local_reward = judgement.local[(turn, agent)].value, and
    local_mask = 1 when that reward exists with mask True (else local_reward = 0, local_mask = 0).
    """
    if max_prompt_len < 1 or max_response_len < 1:
        raise ValueError(f"max_prompt_len and max_response_len must be >= 1, got {max_prompt_len}, {max_response_len}")
    rows, uids, structure, failed = [], [], [], 0
    for g in groups:
        structure.append([])
        for r in g.episodes:
            structure[-1].append([])
            for s in r.samples:
                if policy is not None and s.policy != policy:
                    continue
                if s.finish_reason == FAILED:
                    failed += 1
                    continue
                structure[-1][-1].append(len(rows))
                rows.append((r, s))
                uids.append(g.uid)
    if not rows:
        raise ValueError(f"no trainable samples for policy {policy!r} ({failed} failed)")
    prompts = [s.prompt_ids[-max_prompt_len:] for _, s in rows]
    responses = [s.response_ids[:max_response_len] for _, s in rows]
    log_probs = [s.rollout_log_probs[:max_response_len] for _, s in rows]
    tensors = prompt_response_tensors(prompts, responses, pad_id)
    log_prob_t, _ = right_padded(log_probs, 0.0, torch.float32)
    generated, _ = right_padded([s.generated[:max_response_len] for _, s in rows], 0, tensors["response_mask"].dtype)
    tensors["response_mask"] = tensors["response_mask"] * generated
    tensors |= teacher_tensors([s for _, s in rows], tensors["responses"].shape[1])
    judged = [s.judge is not None for _, s in rows]
    if any(judged):
        tensors["judge_score"] = torch.tensor([s.judge or 0.0 for _, s in rows], dtype=torch.float32)

    team, local, local_mask = [], [], []
    for r, s in rows:
        reward = r.judgement.local.get((s.turn, s.agent))
        available = reward is not None and reward.mask
        team.append(r.judgement.team)
        local.append(reward.value if available else 0.0)
        local_mask.append(1.0 if available else 0.0)

    return DataProto.from_dict(
        tensors={
            **tensors,
            "rollout_log_probs": log_prob_t,
            "team_reward": torch.tensor(team, dtype=torch.float32),
            "local_reward": torch.tensor(local, dtype=torch.float32),
            "local_mask": torch.tensor(local_mask, dtype=torch.float32),
        },
        non_tensors={
            "uid": column(uids),
            "episode_id": column([s.episode_id for _, s in rows]),
            "branch": column([s.branch for _, s in rows]),
            "turn": column([s.turn for _, s in rows]),
            "agent": column([s.agent for _, s in rows]),
            "role": column([s.role for _, s in rows]),
            "agent_index": column([s.agent_index for _, s in rows]),
            "policy": column([s.policy for _, s in rows]),
            "policy_version": column([s.version for _, s in rows]),
            "num_turns": column([len(r.episode.turns) for r, _ in rows]),
            "is_last_turn": column([s.turn == len(r.episode.turns) - 1 for r, s in rows]),
            "teacher_scored": column([s.teacher is not None for _, s in rows]),
            "privileged": column([s.teacher is not None and s.teacher.privileged for _, s in rows]),
            "judged": column(judged),
        },
        meta_info={
            "policy": policy,
            "truncated_prompts": sum(len(s.prompt_ids) > max_prompt_len for _, s in rows),
            "truncated_responses": sum(len(s.response_ids) > max_response_len for _, s in rows),
            "failed_samples": failed,
            EPISODE_ROWS: EpisodeRows(tuple(tuple(tuple(episode) for episode in group) for group in structure)),
        },
    )


def teacher_tensors(samples: Sequence[Sample], width: int) -> dict[str, torch.Tensor]:
    """teacher_log_probs [B, width] and teacher_contrast_log_probs [B, κ, width] from the samples'
    teacher scores, with teacher_topk_ids / teacher_topk_log_probs [B, width, k] where the scores
    have a top k; none when no sample was scored."""
    scored = [s.teacher for s in samples if s.teacher is not None]
    if not scored:
        return {}
    kappa = len(scored[0].contrast)
    own = torch.zeros((len(samples), width), dtype=torch.float32)
    contrast = torch.zeros((len(samples), kappa, width), dtype=torch.float32)
    for b, sample in enumerate(samples):
        if sample.teacher is None:
            continue
        scores = sample.teacher
        own[b, : len(scores.log_probs[:width])] = torch.tensor(scores.log_probs[:width], dtype=torch.float32)
        for i, row in enumerate(scores.contrast):
            contrast[b, i, : len(row[:width])] = torch.tensor(row[:width], dtype=torch.float32)
    out = {"teacher_log_probs": own} | ({"teacher_contrast_log_probs": contrast} if kappa else {})
    return out | _topk_tensors(samples, width)


def _topk_tensors(samples: Sequence[Sample], width: int) -> dict[str, torch.Tensor]:
    """teacher_topk_ids (int64) and teacher_topk_log_probs [B, width, k], 0 where a sample has none."""
    tops = [s.teacher for s in samples if s.teacher is not None and s.teacher.topk_ids]
    if not tops:
        return {}
    k = len(tops[0].topk_ids[0])
    ids = torch.zeros((len(samples), width, k), dtype=torch.int64)
    log_probs = torch.zeros((len(samples), width, k), dtype=torch.float32)
    for b, sample in enumerate(samples):
        if sample.teacher is None or not sample.teacher.topk_ids:
            continue
        n = len(sample.teacher.topk_ids[:width])
        ids[b, :n] = torch.tensor(sample.teacher.topk_ids[:width], dtype=torch.int64)
        log_probs[b, :n] = torch.tensor(sample.teacher.topk_log_probs[:width], dtype=torch.float32)
    return {"teacher_topk_ids": ids, "teacher_topk_log_probs": log_probs}
