"""Teacher cost of `opd` (one pass: the own role) vs `masopd` (plus κ = 1 contrast pass) on the same batch.

Recorded two-turn math episodes (turn 0 a conflict, so turn 1 carries the PAC block), fixed
random responses, the tiny teacher on verl's engine (CPU, forward-only). Reports teacher tokens
processed per response, teacher scoring seconds per step (median of repeats), their masopd/opd
ratios, and the tokens a prefix cache could skip in the contrast pass (leading tokens x_q shares
with x_r). Writes benchmarks/results/teacher_cost.json.

    VERL_PLATFORM=cpu python benchmarks/teacher_cost.py [--episodes 8] [--response-len 48] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("VERL_PLATFORM", "cpu")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from results_file import save_result
from transformers import AutoTokenizer  # noqa: E402
from verl import DataProto  # noqa: E402

from verl_masopd.teacher.attribution import Attributor  # noqa: E402
from verl_masopd.teacher.contexts import TeacherContextBuilder  # noqa: E402
from verl_masopd.teacher.engine_scorer import EngineTeacherScorer  # noqa: E402
from verl_masopd.teacher.scoring import TeacherScoring  # noqa: E402
from verl_masopd.tiny_models import cached_model  # noqa: E402
from verl_masopd.trainer.engine import EngineSettings, PolicyEngine  # noqa: E402
from verl_masopd.workflows.base import Action, Turn  # noqa: E402
from verl_masopd.workflows.math import MathWorkflow  # noqa: E402
from verl_masopd.workflows.problem import Problem  # noqa: E402


def recorded_episodes(workflow: MathWorkflow, count: int) -> dict:
    """Two turns each: a conflict (reasoners wrong, tool users right), then agreement."""
    episodes = {}
    for k in range(count):
        episode = workflow.reset(
            Problem(uid=f"p{k}", domain="math", statement=f"What is {k} times 7 plus 3?", answer=str(7 * k + 3))
        )
        for index, (text, ok) in enumerate(((f"#### {7 * k}", False), (f"#### {7 * k + 3}", True))):
            actions = {
                a.name: Action(a, text if a.role == "reasoner" else f"```python\nprint({7 * k + 3})\n```")
                for a in workflow.agents
            }
            verifier = {"agents": {a.name: {"verdict": ok if a.role == "reasoner" else True} for a in workflow.agents}}
            episode.turns.append(Turn(index, actions, f"The answers {'agree' if ok else 'disagree'}.", ok, verifier))
        episode.done = True
        episodes[f"e{k}"] = episode
    return episodes


def column(values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def policy_batches(workflow: MathWorkflow, episodes: dict, response_len: int, vocab: int, seed: int) -> list[DataProto]:
    """One batch per role policy: every agent's response at every turn, random ids of `response_len`."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for role in workflow.roles:
        rows = [
            (eid, t, a)
            for eid, ep in episodes.items()
            for t in range(len(ep.turns))
            for a in ep.agents
            if a.role == role
        ]
        n = len(rows)
        batches.append(
            DataProto.from_dict(
                tensors={
                    "responses": torch.randint(3, vocab, (n, response_len), generator=generator),
                    "response_mask": torch.ones(n, response_len),
                    "rollout_log_probs": -torch.rand(n, response_len, generator=generator),
                },
                non_tensors={
                    "episode_id": column([r[0] for r in rows]),
                    "turn": column([r[1] for r in rows]),
                    "agent": column([r[2].name for r in rows]),
                    "role": column([role] * n),
                },
            )
        )
    return batches


async def measure(scoring: TeacherScoring, batches, episodes, attributions, repeats: int) -> dict:
    seconds, stats = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        scored = [await scoring.score(b, episodes, attributions) for b in batches]
        seconds.append(time.perf_counter() - start)
        stats = [s.meta_info["teacher"] for s in scored]
    responses = sum(s["responses"] for s in stats)
    tokens = sum(s["teacher_tokens"] for s in stats)
    shared = sum(s["shared_prefix_tokens"] for s in stats)
    return {
        "responses_per_step": responses,
        "teacher_tokens_per_response": tokens / responses,
        "shared_prefix_tokens_per_response": shared / responses,
        "scoring_seconds_per_step": statistics.median(seconds),
        "passes": stats[0]["passes"],
    }


async def main(args) -> dict:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "verl_masopd" / "tiny"
    teacher_path = cached_model(cache, size="small", seed=1)
    tokenizer = AutoTokenizer.from_pretrained(teacher_path)
    engine = PolicyEngine.local(EngineSettings(model_path=teacher_path, forward_only=True))
    scorer = EngineTeacherScorer(engine, pad_id=tokenizer.pad_token_id)
    result = {
        "teacher": "tiny small (~10M params, Qwen3 architecture)",
        "device": "cpu",
        "episodes": args.episodes,
        "response_len": args.response_len,
        "repeats": args.repeats,
        "by_agents_per_role": {},
    }
    for n in (1, 2):
        workflow = MathWorkflow(agents_per_role=n)
        episodes = recorded_episodes(workflow, args.episodes)
        attributions = await Attributor(workflow).attribute(episodes)
        batches = policy_batches(workflow, episodes, args.response_len, len(tokenizer), seed=n)
        builder = TeacherContextBuilder(workflow, tokenizer, max_length=4096)
        await TeacherScoring(builder, scorer, num_contrast_roles=1).score(batches[0], episodes, attributions)  # warm-up
        opd = await measure(
            TeacherScoring(builder, scorer, num_contrast_roles=0), batches, episodes, attributions, args.repeats
        )
        masopd = await measure(
            TeacherScoring(builder, scorer, num_contrast_roles=1), batches, episodes, attributions, args.repeats
        )
        cached_tokens = masopd["teacher_tokens_per_response"] - masopd["shared_prefix_tokens_per_response"]
        result["by_agents_per_role"][n] = {
            "opd": opd,
            "masopd": masopd,
            "token_ratio": masopd["teacher_tokens_per_response"] / opd["teacher_tokens_per_response"],
            "time_ratio": masopd["scoring_seconds_per_step"] / opd["scoring_seconds_per_step"],
            "token_ratio_with_prefix_cache": cached_tokens / opd["teacher_tokens_per_response"],
        }
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--response-len", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    result = asyncio.run(main(args))
    save_result("teacher_cost", result)
