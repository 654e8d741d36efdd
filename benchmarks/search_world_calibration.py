"""Calibration of the tiny search world's models: held-out exact match of the teacher and of the
student (prompt-only), each playing every seat of the hierarchical system (H-MAS: Leader,
Searchers, Answerers) and of the cascaded one (C-MAS: one Searcher given the question, then the
Answerers), through the real RolloutManager with the HF backend and real BM25 retrieval, in the
workflow the models were built for (search_demos.OPTIONS, compact prompts, evaluation sampling).

    python benchmarks/search_world_calibration.py [--heldout N] [--max-new-tokens N]
        [--weights ROOT | --model NAME=PATH ...]

Per system: EM by hops with its standard error sqrt(p (1 − p) / n), and how the roles behaved:
the Searchers' share of replies without a report, their searches per reply, the Leader's share of
episodes ended without a candidate, the Answerers' untagged share; in C-MAS, where the Searcher's
task is the question itself, its copying: the share of its replies whose observations hold a
golden answer (as a whole phrase after SQuAD normalisation: retrieval found the value), the share
whose report is one (exact match), and that share among the replies that saw it, which
separates a failure to retrieve from a failure to copy. And each model as the Prompted
Critic's judge (teacher/judging.py) of Searcher replies to the one-hop subtasks of the held-out
questions, built as the teacher's judge demonstrations are (search_demos.py: the right reply, a
guess without a search, a report of another value): the mean score s of right and of wrong
replies, the share judged on the right side of 0.5, and the AUC (the probability that a right
reply scores above a wrong one, ties counting half). --weights evaluates the pair a
build wrote under ROOT (`python -m verl_masopd.tiny_world build --domain search --out ROOT`,
checked against its manifest) instead of the shipped one; --model other checkpoints (e.g.
pretraining snapshots). Writes
benchmarks/results/search_world_calibration[_<NAME>...].json and prints it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import pandas as pd
import torch
from results_file import save_result

from verl_masopd.rollout.backend import SamplingParams
from verl_masopd.rollout.evaluation import evaluate
from verl_masopd.rollout.hf_backend import HFBackend
from verl_masopd.rollout.manager import RolloutManager
from verl_masopd.rollout.policies import policies_of
from verl_masopd.teacher.judging import approval
from verl_masopd.tiny_world import world
from verl_masopd.tiny_world.builder import recipe
from verl_masopd.tiny_world.search_demos import OPTIONS, SearchDemonstrations, search_workflow
from verl_masopd.tiny_world.search_tasks import HELDOUT_START, task
from verl_masopd.tiny_world.weights import MANIFEST, WEIGHTS, verified_models
from verl_masopd.tokens.chat import encode_messages
from verl_masopd.verify.qa_match import exact_match, normalize_answer
from verl_masopd.workflows.problem import Problem
from verl_masopd.workflows.search import (
    CASCADED,
    HIERARCHICAL,
    LEADER,
    SEARCHER,
    AnswerEvidence,
    SearcherEvidence,
    spans,
)

HELDOUT = 300
MAX_NEW_TOKENS = 640  # two searches with full observations (2 × 240) and the generated text fit
SAMPLING = dict(temperature=0.6, top_p=0.95, top_k=20)
BATCH = 50


def share(values: list) -> dict:
    """n, the mean p of 0/1 values and its standard error sqrt(p (1 − p) / n)."""
    n = len(values)
    p = sum(values) / n if n else 0.0
    return {"n": n, "p": round(p, 4), "se": round(math.sqrt(p * (1 - p) / n), 4) if n else None}


def behaviour(records: list[dict]) -> dict:
    """EM by hops and the roles' behaviour (module doc) over the records' episodes."""
    em, searcher, leader, answerer = defaultdict(list), defaultdict(list), [], []
    for record in records:
        hops = record["data_source"].removeprefix("tiny_search_")
        for episode in record["episodes"]:
            em[hops].append(episode["correct"])
            em["all"].append(episode["correct"])
            roles = {name: seat["role"] for name, seat in episode["agents"].items()}
            if LEADER in roles.values():
                leader.append(not _answered(episode))
            for turn in episode["turns"]:
                for evidence in turn["verifier"]["agents"].values():
                    if isinstance(evidence, SearcherEvidence):
                        searcher["no_summary"].append(evidence.summary is None)
                        searcher["searches"].append(evidence.searches)
                    elif isinstance(evidence, AnswerEvidence):
                        answerer.append(evidence.failure == "untagged")
    searches = searcher["searches"]
    return {
        "em": {hops: share(values) for hops, values in sorted(em.items())},
        "searcher_no_summary": share(searcher["no_summary"]),
        "searches_per_searcher": round(sum(searches) / len(searches), 3) if searches else None,
        "leader_no_candidate": share(leader) if leader else None,
        "answerer_untagged": share(answerer),
    }


def copying(records: list[dict], golds: dict[str, tuple[str, ...]], tag: str = "information") -> dict:
    """The cascaded Searcher's replies (module doc): the share whose observations (`tag` spans)
    hold a golden answer, the share whose report is one, and the latter among the former."""
    saw, right, right_when_seen = [], [], []
    for record in records:
        answers = golds[record["uid"]]
        for episode in record["episodes"]:
            searcher = next(name for name, seat in episode["agents"].items() if seat["role"] == SEARCHER)
            turn = episode["turns"][0]
            observed = f" {normalize_answer(' '.join(spans(turn['outputs'][searcher], tag)))} "
            seen = any(f" {normalize_answer(a)} " in observed for a in answers)
            report = turn["verifier"]["agents"][searcher].summary
            hit = report is not None and exact_match(report, list(answers))
            saw.append(seen)
            right.append(hit)
            if seen:
                right_when_seen.append(hit)
    return {
        "observations_hold_gold": share(saw),
        "report_is_gold": share(right),
        "report_is_gold_when_observed": share(right_when_seen),
    }


def _answered(episode: dict) -> bool:
    return any(isinstance(e, AnswerEvidence) for turn in episode["turns"] for e in turn["verifier"]["agents"].values())


def run(system: str, model: str, problems: list[Problem], index: Path, max_new_tokens: int) -> dict:
    workflow = search_workflow(system, index)
    backend = HFBackend(model, seed=0)
    backends = {policy: backend for policy in policies_of(workflow.agents, "shared")}
    sampling = SamplingParams(max_new_tokens=max_new_tokens, **SAMPLING)
    start = time.perf_counter()
    with RolloutManager(workflow, backends, backend.tokenizer, policy_sharing="shared", sampling=sampling) as manager:
        records = asyncio.run(evaluate(manager, problems, 1, BATCH))
    result = {"eval_seconds": round(time.perf_counter() - start, 1), **behaviour(records)}
    if system == CASCADED:
        result["searcher_copying"] = copying(records, {p.uid: tuple(p.answers) for p in problems})
    return result


def judged_replies(tokenizer, index: Path, questions: range, seed: int = 0) -> list:
    """Judge demonstrations (messages, right or not) of the held-out `questions`."""
    demos = SearchDemonstrations(tokenizer, CASCADED, retriever=index)
    rng = random.Random(seed)
    out = []
    for i in questions:
        judged = demos._judgement(task(i), rng)
        if judged is not None:
            out.append((judged.messages, judged.reply == demos.workflow.judge_verdicts[0]))
    return out


def judge_quality(model_path: str, replies: list) -> dict:
    """Mean score of right and wrong replies, the share on the right side of 0.5, the AUC."""
    backend = HFBackend(model_path, seed=0)
    tokenizer, model = backend.tokenizer, backend.model
    verdicts = [tokenizer.encode(v, add_special_tokens=False) for v in ("yes", "no")]
    scores = {True: [], False: []}
    with torch.no_grad():
        for messages, right in replies:
            context = encode_messages(tokenizer, messages)
            ell = []
            for v in verdicts:
                logits = model(torch.tensor([context + v])).logits[0, len(context) - 1 : -1].float()
                ell.append(float(logits.log_softmax(-1).gather(-1, torch.tensor(v)[:, None]).sum()))
            scores[right].append(approval(*ell))
    pairs = [(r > w) + 0.5 * (r == w) for r in scores[True] for w in scores[False]]
    sides = [s > 0.5 for s in scores[True]] + [s < 0.5 for s in scores[False]]
    return {
        "right_replies": len(scores[True]),
        "wrong_replies": len(scores[False]),
        "mean_score_right": round(statistics.mean(scores[True]), 4),
        "mean_score_wrong": round(statistics.mean(scores[False]), 4),
        "judged_right_side": round(sum(sides) / len(sides), 4),
        "auc": round(sum(pairs) / len(pairs), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heldout", type=int, default=HELDOUT, help=f"held-out questions (default {HELDOUT})")
    parser.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS)
    parser.add_argument("--weights", type=Path, default=WEIGHTS, help=f"weights root (default {WEIGHTS})")
    parser.add_argument("--model", action="append", default=[], metavar="NAME=PATH")
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = world.ensure_search_data(Path(tempfile.mkdtemp(prefix="calibrate-search-")), 1, args.heldout)
    problems = [Problem.from_row(row) for row in pd.read_parquet(data["heldout"]).to_dict("records")]
    models = dict(m.split("=", 1) for m in args.model) or verified_models(
        "search", recipe("search").fingerprint(), root=args.weights
    )
    report = {
        "world": "search",
        "heldout_questions": args.heldout,
        "settings": {
            "workflow": {**OPTIONS, "horizon": {HIERARCHICAL: 2 * OPTIONS["max_waves"] + 2, CASCADED: 2}},
            "max_new_tokens": args.max_new_tokens,
            "sampling": SAMPLING,
            "episodes_per_question": 1,
        },
        "machine": "2-core CPU, one torch thread",
    }
    if not args.model:
        manifest = json.loads((Path(models["teacher"]).parent / MANIFEST).read_text())
        report["build"] = {k: manifest[k] for k in ("build_seconds", "steps", "final_loss", "command")}
    report["systems"] = {
        f"{name}_{'hmas' if system == HIERARCHICAL else 'cmas'}": run(
            system, path, problems, data["index"], args.max_new_tokens
        )
        for name, path in models.items()
        for system in (HIERARCHICAL, CASCADED)
    }
    questions = range(HELDOUT_START, HELDOUT_START + args.heldout)
    replies = judged_replies(HFBackend(next(iter(models.values()))).tokenizer, data["index"], questions)
    report["judge"] = {name: judge_quality(path, replies) for name, path in models.items()}
    suffix = "".join(f"_{name}" for name in models) if args.model else ""
    save_result(f"search_world_calibration{suffix}", report)


if __name__ == "__main__":
    main()
