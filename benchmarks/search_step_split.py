"""Where a training step of the search team spends its time, per role, and what a wave costs as it
grows from 1 to 4 Searchers.

The search tiny world's questions and passages (verl_masopd/tiny_world/search_tasks.py) with its
real BM25 index; the Leader's replies are scripted (k subtasks: the question, then a hand-over of
every report), so that every step plays each role; Searchers and Answerers are sampled by the
student (HF backend, --student; default the tiny test model). Local engines, one shared policy, the
per-role estimators of recipes/multiagent_opd.sh (Searcher opd, Leader grpo, Answerer grpo by
episode).

Step split: per role, the wall time of its turns' responses (`rollout/<role>/turn_seconds`, tool
calls inside included), of which the searches' wall time (`rollout/tool_wall_seconds`); the
teacher's scoring (Searchers only); and the step's update, one call for the shared policy, shown
whole with each role's share of the trained response tokens. Wave cost: rollouts alone with k = 1..4
Searchers per wave; the Searchers' turn seconds per wave (all episodes of a batch generate together)
and per Searcher. The Searchers' query cache of each measured step (`rollout/tool/search/cache_*`:
queries asked, answered without a search of their own, and their ratio) is listed too.

    python benchmarks/search_step_split.py [--steps 3] [--wave-rounds 3] [--student DIR --teacher DIR]
Writes benchmarks/results/search_step_split.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
from pathlib import Path

os.environ.setdefault("VERL_PLATFORM", "cpu")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from results_file import save_result  # noqa: E402

from data_prep.schema import read_problems  # noqa: E402
from verl_masopd.config import compose_config  # noqa: E402
from verl_masopd.config.validate import validate_config  # noqa: E402
from verl_masopd.rollout.backend import Generation, SamplingParams  # noqa: E402
from verl_masopd.rollout.hf_backend import HFBackend  # noqa: E402
from verl_masopd.rollout.manager import RolloutManager  # noqa: E402
from verl_masopd.rollout.records import STOP  # noqa: E402
from verl_masopd.tiny_world.models import cached_model  # noqa: E402
from verl_masopd.tiny_world.search_tasks import write_search_data  # noqa: E402
from verl_masopd.trainer.loop import Trainer  # noqa: E402
from verl_masopd.workflows import make_workflow  # noqa: E402
from verl_masopd.workflows.search import PAPER_INSTRUCTIONS  # noqa: E402

ROLES = ("leader", "searcher", "answerer")


class ScriptedLeader:
    """The student's samples for every role but the Leader, whose reply is k subtasks (the question
    k times) and, once it has reports, the hand-over of all of them."""

    def __init__(self, model_path: str, seed: int, k: int):
        self.inner = HFBackend(model_path, seed=seed)
        self.tokenizer = self.inner.tokenizer
        self.k = k

    async def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Generation]:
        texts = [self.tokenizer.decode(p) for p in prompts]
        leader = [PAPER_INSTRUCTIONS["leader"][:24] in t for t in texts]
        sampled = iter(await self.inner.generate([p for p, is_l in zip(prompts, leader) if not is_l], sampling))
        out = []
        for text, is_leader in zip(texts, leader, strict=True):
            if not is_leader:
                out.append(next(sampled))
                continue
            question = text.split("## Question\n", 1)[1].split("\n", 1)[0]
            sent = "1 of" in text
            reply = f"<select>{', '.join(map(str, range(1, self.k + 1)))}</select>" if sent else ""
            reply = reply or "".join(f"<subtask>{question}</subtask>" for _ in range(self.k))
            ids = self.tokenizer.encode(reply, add_special_tokens=False) + [self.tokenizer.eos_token_id]
            out.append(Generation(ids, [0.0] * len(ids), STOP))
        return out

    def update_weights(self, state_dict: dict, version: int) -> None:
        self.inner.update_weights(state_dict, version)


def overrides(data: Path, student: str, teacher: str, out: Path, k: int, steps: int) -> list[str]:
    return [
        "preset=cpu",
        "engines.placement=local",
        f"students.path={student}",
        f"teacher.model_path={teacher}",
        f"data.train_files=[{data / 'train.parquet'}]",
        "data.train_batch_size=4",
        "data.max_response_length=256",
        "rollout.group_size=2",
        "workflow.name=search",
        "workflow.domain=qa",
        "workflow.horizon=4",
        "workflow.policy_sharing=shared",
        f"++workflow.options.retriever={data / 'index'}",
        "++workflow.options.max_waves=1",
        f"++workflow.options.max_searchers_per_wave={k}",
        "++workflow.options.answer_candidates=2",
        "++workflow.options.max_obs_tokens=160",
        "algorithm.adv_estimator=grpo",
        "++algorithm.per_role.searcher.estimator=opd",
        "++algorithm.per_role.answerer.estimator=grpo",
        "++algorithm.per_role.answerer.group_by=episode",
        f"trainer.total_training_steps={steps}",
        "trainer.save_freq=-1",
        "trainer.logger=[console]",
        f"trainer.default_local_dir={out / 'checkpoints'}",
    ]


def step_split(data: Path, student: str, teacher: str, out: Path, steps: int) -> dict:
    cfg = compose_config(overrides(data, student, teacher, out, 2, steps))
    trainer = Trainer(validate_config(cfg), backend_factory=lambda policy, path, seed: ScriptedLeader(path, seed, 2))
    rows = [trainer.train_step() for _ in range(steps)]
    trainer.close()
    rows = rows[1:] if len(rows) > 1 else rows  # the first step warms up

    def mean(key: str) -> float:
        return statistics.fmean(r.get(key, 0.0) for r in rows)

    tokens = {role: mean(f"rollout/{role}/response_length") for role in ROLES}
    total = sum(tokens.values()) or 1.0
    return {
        "steps_measured": len(rows),
        "per_role_seconds": {
            role: {
                "generation": mean(f"rollout/{role}/turn_seconds")
                - (mean("rollout/tool_wall_seconds") if role == "searcher" else 0.0),
                "retrieval": mean("rollout/tool_wall_seconds") if role == "searcher" else 0.0,
                "teacher": mean("timing_s/teacher") if role == "searcher" else 0.0,
                "update_share_of_response_tokens": tokens[role] / total,
            }
            for role in ROLES
        },
        "step_seconds": {k.split("/", 1)[1]: mean(k) for k in rows[0] if k.startswith("timing_s/")},
        "search_calls_per_step": mean("rollout/tool_calls"),
        "search_cache_per_step": {
            key: [r.get(f"rollout/tool/search/cache_{key}", 0.0) for r in rows]
            for key in ("lookups", "hits", "hit_rate")
        },
    }


def wave_cost(data: Path, student: str, rounds: int) -> dict:
    problems = read_problems(data / "train.parquet")[:4]
    out = {}
    for k in range(1, 5):
        workflow = make_workflow(
            "search",
            "qa",
            1,
            4,
            retriever=str(data / "index"),
            max_waves=1,
            max_searchers_per_wave=k,
            answer_candidates=1,
            max_obs_tokens=160,
        )
        backend = ScriptedLeader(student, 0, k)
        seconds = []
        for _ in range(rounds):
            policies = {p: backend for p in ROLES}
            with RolloutManager(
                workflow, policies, backend.tokenizer, sampling=SamplingParams(max_new_tokens=128)
            ) as m:
                asyncio.run(m.run(problems, group_size=2))
                seconds.append(m.metrics.turn_seconds["searcher"])
        wave = statistics.fmean(seconds)
        out[str(k)] = {"searchers": k * len(problems) * 2, "wave_seconds": wave, "seconds_per_searcher": wave / k}
    return {"problems": len(problems), "group_size": 2, "rounds": rounds, "by_searchers_per_wave": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--wave-rounds", type=int, default=3)
    parser.add_argument("--student", default=None)
    parser.add_argument("--teacher", default=None)
    parser.add_argument("--name", default="search_step_split")
    args = parser.parse_args()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "verl_masopd" / "tiny"
    student = args.student or cached_model(cache, size="tiny", seed=0)
    teacher = args.teacher or cached_model(cache, size="small", seed=1)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        write_search_data(data, train=64, heldout=16)
        report = {
            "student": student,
            "teacher": teacher,
            "step_split": step_split(data, student, teacher, Path(tmp), args.steps),
            "wave_cost": wave_cost(data, student, args.wave_rounds),
        }
    save_result(args.name, report)


if __name__ == "__main__":
    main()
