"""Finished episodes -> one verl `DataProto` per policy (fields: see the module's `to_dataproto`).

A row is one agent's response at one turn, in the project's token layout (`verl_masopd.token_layout`:
prompts left-padded to the longest kept prompt, responses right-padded to the longest kept
response, each at most its limit); rollout_log_probs ℓS_k on y, 0 on padding.

Truncation rule: contexts arrive already cut to `max_prompt_len` by the rollout (the middle of the
history goes, `verl_masopd.context`); one that is still longer keeps its LAST `max_prompt_len`
tokens (the generation prompt stays next to the response); a response longer than
`max_response_len` keeps its first `max_response_len` tokens together with their log-probs. Both
are counted in `meta_info` ("truncated_prompts", "truncated_responses"). Failed turns (no
response) carry no tokens to train on and are left out, counted as "failed_samples".
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from verl import DataProto

from verl_masopd.rollout.records import FAILED, RolloutGroup
from verl_masopd.token_layout import prompt_response_tensors, right_padded


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
    with team/local rewards from each judgement; "uid" is the row's group key and
    "response_ids" the sample's kept response tokens (a list, as `responses` holds them padded).

    team_reward = judgement.team; local_reward = judgement.local[(turn, agent)].value, and
    local_mask = 1 when that reward exists with mask True (else local_reward = 0, local_mask = 0).
    """
    if max_prompt_len < 1 or max_response_len < 1:
        raise ValueError(f"max_prompt_len and max_response_len must be >= 1, got {max_prompt_len}, {max_response_len}")
    mine = [(g, r, s) for g in groups for r in g.episodes for s in r.samples if policy is None or s.policy == policy]
    rows = [(r, s) for _, r, s in mine if s.finish_reason != FAILED]
    uids = [g.uid for g, _, s in mine if s.finish_reason != FAILED]
    failed = len(mine) - len(rows)
    if not rows:
        raise ValueError(f"no trainable samples for policy {policy!r} ({failed} failed)")
    prompts = [s.prompt_ids[-max_prompt_len:] for _, s in rows]
    responses = [s.response_ids[:max_response_len] for _, s in rows]
    log_probs = [s.rollout_log_probs[:max_response_len] for _, s in rows]
    tensors = prompt_response_tensors(prompts, responses, pad_id)
    log_prob_t, _ = right_padded(log_probs, 0.0, torch.float32)

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
            "response_ids": column(responses),
            "episode_id": column([s.episode_id for _, s in rows]),
            "branch": column([s.branch for _, s in rows]),
            "turn": column([s.turn for _, s in rows]),
            "agent": column([s.agent for _, s in rows]),
            "role": column([s.role for _, s in rows]),
            "agent_index": column([s.agent_index for _, s in rows]),
            "policy": column([s.policy for _, s in rows]),
            "num_turns": column([len(r.episode.turns) for r, _ in rows]),
            "is_last_turn": column([s.turn == len(r.episode.turns) - 1 for r, s in rows]),
            "privileged": column([False] * len(rows)),
        },
        meta_info={
            "policy": policy,
            "truncated_prompts": sum(len(s.prompt_ids) > max_prompt_len for _, s in rows),
            "truncated_responses": sum(len(s.response_ids) > max_response_len for _, s in rows),
            "failed_samples": failed,
        },
    )
