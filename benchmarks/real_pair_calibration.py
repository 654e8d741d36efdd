"""How much there is to distil: the real pair (Qwen2.5-Coder-0.5B-Instruct, the student;
Qwen2.5-Coder-1.5B-Instruct, the teacher) untrained, each alone and as the Reasoner–Tool-User team
(both seats the same model), on GSM8K's held-out problems, before any training.

    python benchmarks/real_pair_calibration.py --gsm8k train.jsonl [--problems 300] [--state DIR]
        [--student DIR --teacher DIR] [--engine vllm|hf] [--save]

Systems, each model in turn (paper prompts, the evaluation sampling of docs/method.md: temperature
0.6, top-p 0.95, top-k 20; one episode per problem, seed 0):
    single   the Reasoner alone, one turn (SA+ST: `--workflow sa --horizon 1`)
    team     Reasoner and Tool-User, horizon 4, ending on agreement (`--workflow mas --horizon 4`)
Problems: the first --problems of the held-out part (benchmarks/real_pair_data.py: the release's
last 1,000 rows). Reported per cell: accuracy ± its standard error, format violations per role
(replies the workflow could not parse), agreement (the share of episodes that ended agreed, and
the turns to agreement), reply lengths per role (mean tokens, share that hit the limit), and the
Reasoner's accuracy in any format: the share of episodes whose Reasoner's last reply states the
reference answer after its last `####` or in its last `\\boxed{}` (what the workflow's parser would
score if it also read `\\boxed{}`; how much of the gap is format alone).

Layout under --state (default .cache/real_pair): models/<name>/ (fetched unless given), data/,
calibration/<model>_<system>/ (eval/, eval.log, done.json; a cell with done.json is not run again).
--save writes benchmarks/results/real_pair/calibration.{json,md}.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
from real_pair_data import ROOT, gsm8k_parts
from transformers import AutoTokenizer

from verl_masopd.verify.answer_rule import AnswerRule, answer_matches
from verl_masopd.verify.extract import extract_boxed, extract_hash_answer

RESULTS = ROOT / "benchmarks" / "results" / "real_pair"
MODELS = {"student": "qwen2.5-coder-0.5b-instruct", "teacher": "qwen2.5-coder-1.5b-instruct"}
SYSTEMS = {"single": ["--workflow", "sa", "--horizon", "1"], "team": ["--workflow", "mas", "--horizon", "4"]}
DONE = "done.json"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gsm8k", required=True, type=Path, help="openai/grade-school-math train.jsonl")
    p.add_argument("--problems", type=int, default=300, help="held-out problems (default 300)")
    p.add_argument("--max-new-tokens", type=int, default=512, help="reply budget per turn (default 512)")
    p.add_argument("--batch-size", type=int, default=64, help="problems played at once (default 64)")
    p.add_argument("--state", type=Path, default=ROOT / ".cache" / "real_pair")
    p.add_argument("--student", help="the 0.5B folder (default: fetched into STATE/models)")
    p.add_argument("--teacher", help="the 1.5B folder (default: fetched into STATE/models)")
    p.add_argument("--engine", help="python -m verl_masopd.eval's generation engine (default: its own)")
    p.add_argument("--only", help="comma-separated cells, e.g. student_single,teacher_team")
    p.add_argument("--save", action="store_true", help="write benchmarks/results/real_pair/calibration.*")
    return p


def environment() -> dict:
    return {**os.environ, "VERL_PLATFORM": "cpu", "RAY_AUTH_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false"}


def run(command: list[str], log: Path) -> None:
    with open(log, "w") as out:
        code = subprocess.run(command, cwd=ROOT, stdout=out, stderr=out, env=environment()).returncode
    if code:
        raise SystemExit(f"real_pair_calibration: {' '.join(command[2:4])} failed (exit {code}), see {log}")


def model_folder(role: str, given: str | None, state: Path) -> str:
    if given:
        return given
    out = state / "models" / MODELS[role]
    out.parent.mkdir(parents=True, exist_ok=True)
    run([sys.executable, "-m", "verl_masopd.models", "fetch", MODELS[role], "--out", str(out)],
        state / f"fetch_{role}.log")  # fmt: skip
    return str(out)


def reply_lengths(records: Path, tokenizer, limit: int) -> dict[str, dict[str, float]]:
    """Per role: the mean reply length in tokens and the share of replies that reached `limit`."""
    lengths: dict[str, list[int]] = {}
    for line in records.read_text().splitlines():
        for episode in json.loads(line)["episodes"]:
            roles = {name: seat["role"] for name, seat in episode["agents"].items()}
            for turn in episode["turns"]:
                for name, text in turn["outputs"].items():
                    lengths.setdefault(roles[name], []).append(len(tokenizer.encode(text, add_special_tokens=False)))
    return {
        role: {"mean_tokens": sum(n) / len(n), "at_limit": sum(x >= limit for x in n) / len(n)}
        for role, n in sorted(lengths.items())
    }


def reasoner_accuracy_any_format(records: Path, heldout: Path) -> float:
    """The share of episodes whose Reasoner's last reply ends on the reference answer, after `####`
    or in `\\boxed{}`, whichever comes last."""
    gold = {
        str(row["extra_info"]["id"]): str(row["reward_model"]["ground_truth"])
        for row in pq.read_table(heldout, columns=["extra_info", "reward_model"]).to_pylist()
    }
    right = total = 0
    for line in records.read_text().splitlines():
        record = json.loads(line)
        for episode in record["episodes"]:
            reasoner = next(name for name, seat in episode["agents"].items() if seat["role"] == "reasoner")
            text = episode["turns"][-1]["outputs"][reasoner]
            hashed, boxed = extract_hash_answer(text), extract_boxed(text)
            last = (
                hashed
                if boxed is None or (hashed is not None and text.rfind("####") > text.rfind("\\boxed"))
                else boxed
            )
            right += last is not None and answer_matches(last, gold[record["uid"]], AnswerRule())
            total += 1
    return right / total


def cell(name: str, model: str, system: str, heldout: Path, args) -> dict:
    folder = args.state / "calibration" / name
    if (folder / DONE).is_file():
        return json.loads((folder / DONE).read_text())
    folder.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "verl_masopd.eval", "--data", str(heldout), "--model", model, *SYSTEMS[system],
        "--prompt-style", "paper", "--max-new-tokens", str(args.max_new_tokens), "--k", "1",
        "--limit", str(args.problems), "--batch-size", str(args.batch_size), "--seed", "0",
        "--out", str(folder / "eval"), *(["--engine", args.engine] if args.engine else []),
    ]  # fmt: skip
    started = time.time()
    run(command, folder / "eval.log")
    seconds = time.time() - started
    with open(folder / "eval" / "summary.csv") as f:
        summary = next(csv.DictReader(f))
    accuracy, n = float(summary["accuracy"]), int(summary["episodes"])
    result = {
        "cell": name,
        "model": model,
        "system": system,
        "problems": n,
        "accuracy": accuracy,
        "accuracy_se": math.sqrt(accuracy * (1 - accuracy) / n),
        "agreed_share": float(summary["agreed_share"]),
        "turns_to_agreement": float(summary["turns_to_agreement"]),
        "avg_turns": float(summary["avg_turns"]),
        "format_violations": {
            key.split("/", 1)[1]: float(value) for key, value in summary.items() if key.startswith("format_violations/")
        },
        "reply_lengths": reply_lengths(
            folder / "eval" / "records.jsonl", AutoTokenizer.from_pretrained(model), args.max_new_tokens
        ),
        "reasoner_accuracy_any_format": reasoner_accuracy_any_format(folder / "eval" / "records.jsonl", heldout),
        "eval_seconds": round(seconds, 1),
        "settings": json.loads((folder / "eval" / "settings.json").read_text()),
    }
    (folder / DONE).write_text(json.dumps(result, indent=2) + "\n")
    return result


def markdown(cells: list[dict]) -> str:
    lines = [
        "| model | system | accuracy ± se | agreed | turns to agreement | format violations (Reasoner / Tool-User) "
        "| reply tokens (Reasoner / Tool-User) | at the limit | Reasoner right in any format | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        violations = " / ".join(f"{c['format_violations'].get(r, float('nan')):.2f}" for r in ("reasoner", "tool_user"))
        lengths = c["reply_lengths"]
        tokens = " / ".join(
            f"{lengths[r]['mean_tokens']:.0f}" if r in lengths else "—" for r in ("reasoner", "tool_user")
        )
        limit = " / ".join(f"{lengths[r]['at_limit']:.2f}" if r in lengths else "—" for r in ("reasoner", "tool_user"))
        lines.append(
            f"| {c['cell'].split('_')[0]} | {c['system']} | {c['accuracy']:.3f} ± {c['accuracy_se']:.3f} | "
            f"{c['agreed_share']:.2f} | {c['turns_to_agreement']:.2f} | {violations} | {tokens} | {limit} | "
            f"{c['reasoner_accuracy_any_format']:.3f} | {c['eval_seconds']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    heldout = gsm8k_parts(args.gsm8k, args.state / "data")["heldout"]
    models = {role: model_folder(role, getattr(args, role), args.state) for role in MODELS}
    wanted = args.only.split(",") if args.only else [f"{r}_{s}" for r in MODELS for s in SYSTEMS]
    cells = []
    for name in wanted:
        role, system = name.split("_")
        cells.append(cell(name, models[role], system, heldout, args))
        print(json.dumps({k: v for k, v in cells[-1].items() if k != "settings"}), flush=True)
    table = markdown(cells)
    print(table)
    if args.save:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "calibration.json").write_text(json.dumps({"cells": cells}, indent=2) + "\n")
        (RESULTS / "calibration.md").write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
