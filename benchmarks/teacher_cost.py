"""Teacher cost of `opd` (one pass: the own role) vs `masopd` (plus κ = 1 contrast pass) on the same batch.

Recorded two-turn math episodes (turn 0 a conflict, so turn 1 carries the PAC block), fixed
random responses, the tiny teacher on verl's engine (CPU, forward-only). Variants, taking turns:
the context layout (role_first, role_last) and the engine scorer's path (the packed batch pass,
or the shared-prefix path that computes a response's common context prefix once). Reports, per
response, the teacher tokens of the contexts, the tokens actually computed and the tokens the
contrast context shares with x_r; teacher scoring seconds per step (median of repeats); and the
masopd/opd ratios. Writes benchmarks/results/teacher_cost.json; with --tiny-world, the tiny world's
shipped math teacher and its compact prompts (contexts of ~150–300 tokens) instead, written to
benchmarks/results/teacher_cost_tiny_world.json.

    VERL_PLATFORM=cpu python benchmarks/teacher_cost.py [--episodes 8] [--response-len 48] [--repeats 3] [--tiny-world]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("VERL_PLATFORM", "cpu")

import torch  # noqa: E402
from results_file import save_result
from transformers import AutoTokenizer  # noqa: E402

from verl_masopd.engine.policy_engine import EngineSettings, PolicyEngine  # noqa: E402
from verl_masopd.rollout.records import EpisodeResult, Sample  # noqa: E402
from verl_masopd.teacher.attribution import Attributor  # noqa: E402
from verl_masopd.teacher.contexts import TeacherContextBuilder  # noqa: E402
from verl_masopd.teacher.engine_scorer import EngineTeacherScorer  # noqa: E402
from verl_masopd.teacher.scoring import TeacherScoring  # noqa: E402
from verl_masopd.tiny_world.models import cached_model  # noqa: E402
from verl_masopd.tiny_world.weights import WEIGHTS  # noqa: E402
from verl_masopd.tiny_world.world import PROMPT_STYLE  # noqa: E402
from verl_masopd.workflows.base import Action, Judgement, Turn  # noqa: E402
from verl_masopd.workflows.math import MathWorkflow, ReasonerEvidence, ToolUserEvidence  # noqa: E402
from verl_masopd.workflows.problem import Problem  # noqa: E402
from verl_masopd.workflows.prompted import PAPER  # noqa: E402


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
            verifier = {"agents": {a.name: evidence(a.role, text, str(7 * k + 3)) for a in workflow.agents}}
            episode.turns.append(Turn(index, actions, f"The answers {'agree' if ok else 'disagree'}.", ok, verifier))
        episode.done = True
        episodes[f"e{k}"] = episode
    return episodes


def evidence(role: str, reasoner_text: str, right: str) -> ReasonerEvidence | ToolUserEvidence:
    """The verifier's record of one agent at a turn: the reasoner's `#### n` checked against
    `right`; the tool user's program printed `right`."""
    if role == "reasoner":
        answer = reasoner_text.removeprefix("#### ")
        return ReasonerEvidence(verdict=answer == right, answer=answer, correct=answer == right, reason=None)
    return ToolUserEvidence(verdict=True, run=True, output=f"{right}\n", failure=None, answer=right, correct=True)


def recorded_results(workflow: MathWorkflow, episodes: dict, response_len: int, vocab: int, seed: int) -> list:
    """The step's records: every agent's response at every turn, random ids of `response_len`."""
    generator = torch.Generator().manual_seed(seed)
    results = []
    for eid, episode in episodes.items():
        samples = [
            Sample(
                eid, 0, t, agent.name, agent.role, 0, agent.role, [1, 2],
                torch.randint(3, vocab, (response_len,), generator=generator).tolist(),
                (-torch.rand(response_len, generator=generator)).tolist(), "stop",
            )
            for t in range(len(episode.turns))
            for agent in episode.agents
        ]  # fmt: skip
        results.append(EpisodeResult(eid, episode, samples, Judgement(True, 1.0, episode.problem.answer), 0))
    return results


VARIANTS = {
    # name: (layout, kappa, share_prefix)
    "opd/role_first/packed": ("role_first", 0, False),
    "masopd/role_first/packed": ("role_first", 1, False),
    "opd/role_first/shared_prefix": ("role_first", 0, True),
    "masopd/role_first/shared_prefix": ("role_first", 1, True),
    "opd/role_last/packed": ("role_last", 0, False),
    "masopd/role_last/packed": ("role_last", 1, False),
    "opd/role_last/shared_prefix": ("role_last", 0, True),
    "masopd/role_last/shared_prefix": ("role_last", 1, True),
}


async def measure(scorings: dict, results, attributions, repeats: int) -> dict:
    """Median seconds per step and token counts of every variant, the variants taking turns."""
    seconds = {name: [] for name in scorings}
    stats = {}
    for _ in range(repeats):
        for name, scoring in scorings.items():
            start = time.perf_counter()
            stats[name] = await scoring.score(results, attributions)
            seconds[name].append(time.perf_counter() - start)
    out = {}
    for name, s in stats.items():
        out[name] = {
            "responses_per_step": s.responses,
            "passes": s.passes,
            "teacher_tokens_per_response": s.teacher_tokens / s.responses,
            "computed_tokens_per_response": s.computed_tokens / s.responses,
            "shared_prefix_tokens_per_response": s.shared_prefix_tokens / s.responses,
            "scoring_seconds_per_step": statistics.median(seconds[name]),
        }
    return out


async def main(args) -> dict:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "verl_masopd" / "tiny"
    teacher_path = str(WEIGHTS / "math" / "teacher") if args.tiny_world else cached_model(cache, size="small", seed=1)
    tokenizer = AutoTokenizer.from_pretrained(teacher_path)
    engine = PolicyEngine.local(EngineSettings(model_path=teacher_path, forward_only=True))
    result = {
        "teacher": "tiny world math teacher, compact prompts"
        if args.tiny_world
        else "tiny small (~10M params, Qwen3 architecture)",
        "device": "cpu (compare variants within one run)",
        "episodes": args.episodes,
        "response_len": args.response_len,
        "repeats": args.repeats,
        "by_agents_per_role": {},
    }
    for n in args.agents_per_role:
        workflow = MathWorkflow(agents_per_role=n, prompt_style=PROMPT_STYLE if args.tiny_world else PAPER)
        episodes = recorded_episodes(workflow, args.episodes)
        attributions = await Attributor(workflow).attribute(episodes)
        results = recorded_results(workflow, episodes, args.response_len, len(tokenizer), seed=n)
        scorings = {
            name: TeacherScoring(
                TeacherContextBuilder(workflow, tokenizer, max_length=4096, layout=layout),
                EngineTeacherScorer(engine, pad_id=tokenizer.pad_token_id, share_prefix=share),
                num_contrast_roles=kappa,
            )
            for name, (layout, kappa, share) in VARIANTS.items()
        }
        await scorings["masopd/role_last/packed"].score(results[:1], attributions)  # warm-up
        runs = await measure(scorings, results, attributions, args.repeats)
        ratios = {}
        for layout, scoring in (
            ("role_first", "packed"),
            ("role_first", "shared_prefix"),
            ("role_last", "packed"),
            ("role_last", "shared_prefix"),
        ):
            opd, masopd = runs[f"opd/{layout}/{scoring}"], runs[f"masopd/{layout}/{scoring}"]
            ratios[f"{layout}/{scoring}"] = {
                "time_ratio": masopd["scoring_seconds_per_step"] / opd["scoring_seconds_per_step"],
                "token_ratio": masopd["teacher_tokens_per_response"] / opd["teacher_tokens_per_response"],
                "computed_token_ratio": masopd["computed_tokens_per_response"] / opd["computed_tokens_per_response"],
            }
        best_opd = min(runs[name]["scoring_seconds_per_step"] for name in runs if name.startswith("opd/"))
        ratios["masopd/role_last/shared_prefix vs fastest opd"] = (
            runs["masopd/role_last/shared_prefix"]["scoring_seconds_per_step"] / best_opd
        )
        result["by_agents_per_role"][n] = {"variants": runs, "masopd_over_opd": ratios}
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--response-len", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--agents-per-role", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--tiny-world", action="store_true", help="the tiny world's math teacher and prompts")
    args = parser.parse_args()
    result = asyncio.run(main(args))
    save_result("teacher_cost_tiny_world" if args.tiny_world else "teacher_cost", result)
