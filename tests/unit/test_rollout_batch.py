"""to_dataproto: layout, alignment, truncation rule, rewards, per-policy filtering, the records'
structure over the rows (EpisodeRows) and its selection."""

from __future__ import annotations

import pytest
import torch

from verl_masopd.rollout.batch import to_dataproto
from verl_masopd.rollout.episode_rows import EpisodeRows
from verl_masopd.rollout.records import EpisodeResult, RolloutGroup, Sample, TeacherScores
from verl_masopd.workflows.base import Agent, Episode, Judgement, Reward, Turn
from verl_masopd.workflows.problem import Problem

PAD = 0


def group(samples, turns=2, team=0.5, local=None):
    problem = Problem(uid="p0", domain="math", statement="s", answer="1")
    agents = (Agent("coder_0", "coder", 0), Agent("tester_0", "tester", 0))
    episode = Episode(problem, agents, [Turn(t, {}, "", False) for t in range(turns)], done=True)
    return RolloutGroup(
        problem, [EpisodeResult("p0#1", episode, samples, Judgement(False, team, None, local or {}), 0)]
    )


def sample(turn, agent, prompt, response, log_probs, finish="stop", policy=None):
    role, index = agent.split("_")
    return Sample("p0#1", 0, turn, agent, role, int(index), policy or role, prompt, response, log_probs, finish)


def test_layout_alignment_and_rewards():
    samples = [
        sample(0, "coder_0", [11, 12, 13], [21, 22], [-0.1, -0.2]),
        sample(0, "tester_0", [31], [41], [-0.9]),
        sample(1, "coder_0", [14], [23, 24, 25], [-0.3, -0.4, -0.5]),
    ]
    local = {(0, "coder_0"): Reward(0.8, True), (1, "coder_0"): Reward(0.0, False)}
    batch = to_dataproto([group(samples, local=local)], "coder", max_prompt_len=8, max_response_len=8, pad_id=PAD)
    b = batch.batch
    assert b["prompts"].tolist() == [[11, 12, 13], [PAD, PAD, 14]]
    assert b["responses"].tolist() == [[21, 22, PAD], [23, 24, 25]]
    assert b["input_ids"].tolist() == [[11, 12, 13, 21, 22, PAD], [PAD, PAD, 14, 23, 24, 25]]
    assert b["attention_mask"].tolist() == [[1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1]]
    assert b["position_ids"].tolist() == [[0, 1, 2, 3, 4, 4], [0, 0, 0, 1, 2, 3]]
    assert b["response_mask"].tolist() == [[1, 1, 0], [1, 1, 1]]
    assert torch.allclose(b["rollout_log_probs"], torch.tensor([[-0.1, -0.2, 0.0], [-0.3, -0.4, -0.5]]))
    assert b["team_reward"].tolist() == [0.5, 0.5]
    assert torch.allclose(b["local_reward"], torch.tensor([0.8, 0.0]))
    assert b["local_mask"].tolist() == [1.0, 0.0]
    nt = batch.non_tensor_batch
    assert list(nt["turn"]) == [0, 1] and list(nt["agent"]) == ["coder_0", "coder_0"]
    assert list(nt["uid"]) == ["p0", "p0"] and list(nt["episode_id"]) == ["p0#1", "p0#1"]
    assert list(nt["num_turns"]) == [2, 2] and list(nt["is_last_turn"]) == [False, True]
    assert list(nt["role"]) == ["coder", "coder"] and list(nt["policy"]) == ["coder", "coder"]
    assert list(nt["agent_index"]) == [0, 0]
    assert list(nt["privileged"]) == [False, False] and list(nt["branch"]) == [0, 0]
    assert batch.meta_info == {
        "policy": "coder",
        "truncated_prompts": 0,
        "truncated_responses": 0,
        "failed_samples": 0,
        "episode_rows": EpisodeRows((((0, 1),),)),
    }


def test_long_prompts_keep_their_last_tokens_and_responses_stay_aligned():
    samples = [
        sample(0, "coder_0", [1, 2, 3, 4, 5, 6], [7, 8, 9], [-0.7, -0.8, -0.9]),
        sample(1, "coder_0", [10, 11], [12], [-1.2]),
    ]
    batch = to_dataproto([group(samples)], "coder", max_prompt_len=4, max_response_len=2, pad_id=PAD)
    b = batch.batch
    assert b["prompts"].tolist() == [[3, 4, 5, 6], [PAD, PAD, 10, 11]]
    assert b["responses"].tolist() == [[7, 8], [12, PAD]]
    assert torch.allclose(b["rollout_log_probs"], torch.tensor([[-0.7, -0.8], [-1.2, 0.0]]))
    # the response still starts right after the kept context, in input_ids and positions alike
    assert b["input_ids"].tolist() == [[3, 4, 5, 6, 7, 8], [PAD, PAD, 10, 11, 12, PAD]]
    assert b["position_ids"].tolist() == [[0, 1, 2, 3, 4, 5], [0, 0, 0, 1, 2, 2]]
    assert batch.meta_info["truncated_prompts"] == 1 and batch.meta_info["truncated_responses"] == 1


def test_failed_samples_left_out_and_counted_other_policies_ignored():
    samples = [
        sample(0, "coder_0", [1], [], [], finish="failed"),
        sample(0, "tester_0", [2], [3], [-0.3]),
        sample(1, "coder_0", [4], [5], [-0.5]),
    ]
    batch = to_dataproto([group(samples)], "coder", 8, 8, PAD)
    assert len(batch) == 1 and batch.batch["responses"].tolist() == [[5]]
    assert batch.meta_info["failed_samples"] == 1
    assert batch.meta_info["episode_rows"] == EpisodeRows((((0,),),))


def test_rows_keep_the_records_groups_and_episodes():
    def played(uid, episodes):
        problem = Problem(uid=uid, domain="math", statement="s", answer="1")
        agents = (Agent("coder_0", "coder", 0), Agent("tester_0", "tester", 0))
        return RolloutGroup(
            problem,
            [
                EpisodeResult(
                    f"{uid}#{e}", Episode(problem, agents, [], done=True), samples, Judgement(False, 0, None), 0
                )
                for e, samples in enumerate(episodes)
            ],
        )

    failed = sample(0, "coder_0", [1], [], [], finish="failed")
    ok = [sample(0, "coder_0", [1], [2], [-0.1]), sample(0, "tester_0", [3], [4], [-0.2])]
    groups = [played("p", [ok, [failed, ok[1]]]), played("q", [[failed], ok])]
    batch = to_dataproto(groups, None, 8, 8, PAD)
    # p: episode 0 rows 0, 1; episode 1 its tester's row 2; q: episode 0 none (failed), episode 1 rows 3, 4
    rows = EpisodeRows((((0, 1), (2,)), ((), (3, 4))))
    assert batch.meta_info["episode_rows"] == rows
    assert list(batch.non_tensor_batch["uid"]) == ["p", "p", "p", "q", "q"]
    # the testers' rows 1, 2 and 4 alone: renumbered 0, 1, 2; positions of groups and episodes kept
    assert rows.select([1, 2, 4]) == EpisodeRows((((0,), (1,)), ((), (2,))))


def test_no_rows_is_an_error_naming_the_policy():
    with pytest.raises(ValueError, match="'tester'"):
        to_dataproto([group([sample(0, "coder_0", [1], [2], [-0.1])])], "tester", 8, 8, PAD)


def test_observation_tokens_are_attended_but_masked_from_the_loss_and_teacher_scores_land_per_row():
    with_tool = sample(0, "coder_0", [1, 2], [21, 90, 91, 22, 23], [-0.1, 0.0, 0.0, -0.2, -0.3])
    with_tool.generated = [1, 0, 0, 1, 1]
    with_tool.teacher = TeacherScores([-1.0, 0.0, 0.0, -2.0, -3.0], [[-4.0, 0.0, 0.0, -5.0, -6.0]], True)
    plain = sample(1, "coder_0", [3], [24], [-0.4])
    plain.teacher = TeacherScores([-7.0], [[-8.0]], False)
    batch = to_dataproto([group([with_tool, plain])], "coder", 8, 4, PAD)
    b = batch.batch
    assert b["response_mask"].tolist() == [[1, 0, 0, 1], [1, 0, 0, 0]]
    assert b["attention_mask"].tolist() == [[1, 1, 1, 1, 1, 1], [0, 1, 1, 0, 0, 0]]
    assert b["teacher_log_probs"].tolist() == [[-1.0, 0.0, 0.0, -2.0], [-7.0, 0.0, 0.0, 0.0]]
    assert b["teacher_contrast_log_probs"].tolist() == [[[-4.0, 0.0, 0.0, -5.0]], [[-8.0, 0.0, 0.0, 0.0]]]
    assert list(batch.non_tensor_batch["privileged"]) == [True, False]


def test_unscored_records_carry_no_teacher_fields():
    batch = to_dataproto([group([sample(0, "coder_0", [1], [2], [-0.1])])], "coder", 8, 8, PAD)
    assert "teacher_log_probs" not in batch.batch.keys()
