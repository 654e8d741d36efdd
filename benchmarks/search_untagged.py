"""Where the search systems' untagged answers come from, read from the comparison's archived records.

An Answerer reply without an `<answer>` tag scores 0 ("untagged"). For every system and seed of a
search-world comparison (search_world_compare.py --archive DIR: DIR/<system>/seed<k>/qa.tar.gz),
this reads the held-out evaluation's records and counts, over the Answerers' replies:

- untagged share = untagged replies / Answerer replies;
- what an untagged reply opens with: the tag of its first `<tag>` (`search` is a Searcher's action,
  `subtask` and `select` the Leader's), `other` for none;
- the share by what the Answerer saw: after how many waves of Searchers, and whether the Leader
  handed over at least one non-empty Searcher report;
- from the training log, the validation share of format violations of the Answerers and Searchers
  at each validated step, to show when untagged answers appear during training.

    python benchmarks/search_untagged.py --archive benchmarks/results/search_world_compare_runs \
        --name search_untagged

writes benchmarks/results/<name>.json.
"""

from __future__ import annotations

import argparse
import json
import re
import tarfile
from collections import Counter
from pathlib import Path

from results_file import save_result

OPENING = re.compile(r"\s*<([a-z_]+)>")
VALIDATION = re.compile(
    r"step:(\d+) .*?val/format_violations/answerer:([\d.e-]+).*?val/format_violations/searcher:([\d.e-]+)"
)


def opening_tag(reply: str) -> str:
    """The tag a reply opens with, or "other"."""
    found = OPENING.match(reply)
    return found.group(1) if found else "other"


def answerer_replies(record: dict) -> list[dict]:
    """Every Answerer reply of a problem's episodes, with what its Answerer saw.

    A reply's `saw_report` is true when the Leader's last handover before it selected at least one
    Searcher report that is non-empty (reports are numbered from 1 in the order the Searchers
    reported); `waves` counts the waves of Searchers the Leader sent before it."""
    replies = []
    for episode in record["episodes"]:
        reports: list[str] = []
        selected: list[int] = []
        waves = 0
        for turn in episode["turns"]:
            verifier = turn["verifier"]
            for agent, verdict in verifier["agents"].items():
                if agent.startswith("searcher"):
                    reports.append(verdict.get("summary") or "")
            if verifier.get("handover"):
                selected = verifier["handover"]
            waves += any(v.get("decision") == "wave" for a, v in verifier["agents"].items() if a.startswith("leader"))
            for agent, reply in turn["outputs"].items():
                if not agent.startswith("answerer"):
                    continue
                seen = [reports[i - 1] for i in selected if 0 < i <= len(reports)]
                replies.append(
                    {
                        "untagged": agent in turn["parse_errors"],
                        "opening": opening_tag(reply),
                        "waves": waves,
                        "saw_report": any(seen),
                        "hops": record["data_source"].rsplit("_", 1)[-1],
                    }
                )
    return replies


def share(rows: list[dict], **where) -> dict:
    """Untagged replies among the rows matching `where`: count, untagged, share."""
    chosen = [r for r in rows if all(r[k] == v for k, v in where.items())]
    untagged = sum(r["untagged"] for r in chosen)
    return {"replies": len(chosen), "untagged": untagged, "share": untagged / len(chosen) if chosen else None}


def read_cell(archive: Path) -> tuple[list[dict], list[dict]]:
    """The Answerer replies of a cell's held-out evaluation and its validation curve."""
    replies, curve = [], []
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if member.name.endswith("eval/qa-heldout/records.jsonl"):
                for line in tar.extractfile(member).read().decode().splitlines():
                    replies.extend(answerer_replies(json.loads(line)))
            elif member.name.endswith("train/qa/train.log"):
                text = tar.extractfile(member).read().decode()
                curve = [
                    {"step": int(s), "answerer": float(a), "searcher": float(b)} for s, a, b in VALIDATION.findall(text)
                ]
    return replies, curve


def summarise(archive_root: Path) -> dict:
    """Per system: the untagged share over its seeds, its split, and each seed's."""
    systems = {}
    for system in sorted(p for p in archive_root.iterdir() if p.is_dir()):
        all_replies, seeds = [], {}
        for cell in sorted(system.glob("seed*/qa.tar.gz")):
            replies, curve = read_cell(cell)
            all_replies.extend(replies)
            seeds[cell.parent.name] = {**share(replies), "validation_format_violations": curve}
        untagged = [r for r in all_replies if r["untagged"]]
        openings = Counter(r["opening"] for r in untagged)
        systems[system.name] = {
            **share(all_replies),
            "untagged_opening_with": dict(openings.most_common()),
            "after_one_wave": share(all_replies, waves=1),
            "after_two_waves_or_more": share([r for r in all_replies if r["waves"] > 1]),
            "saw_a_report": share(all_replies, saw_report=True),
            "saw_no_report": share(all_replies, saw_report=False),
            "one_hop": share(all_replies, hops="1hop"),
            "two_hops": share(all_replies, hops="2hop"),
            "seeds": seeds,
        }
    return systems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archive", type=Path, default=Path(__file__).parent / "results" / "search_world_compare_runs")
    parser.add_argument("--name", default="search_untagged")
    args = parser.parse_args()
    save_result(args.name, {"archive": args.archive.name, "systems": summarise(args.archive)})


if __name__ == "__main__":
    main()
