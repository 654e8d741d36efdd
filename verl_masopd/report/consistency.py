"""Evaluations in one report must be comparable: the same sampling and episodes per problem
everywhere, the same benchmark file (and --limit) per benchmark, the same horizon per system
(SA+ST is the single-agent workflow at horizon 1 by definition, so horizons are compared among
runs of one workflow with the same options: the search workflow's options fix its horizon, 2
turns for the cascaded system, 2·max_waves + 2 for the hierarchical one)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from verl_masopd.report.layout import Evaluation

EVERYWHERE = ("k", "temperature", "top_p", "top_k", "max_new_tokens")
PER_BENCHMARK = (("data_sha256", "benchmark file"), ("limit", "limit"))
PER_WORKFLOW = ("horizon",)


def setting_differences(evaluations: list[Evaluation]) -> list[str]:
    """One line per setting that differs within its scope, naming the setting and two runs."""
    lines = []
    lines += _differences(evaluations, lambda e: "all runs", [(key, key) for key in EVERYWHERE])
    lines += _differences(evaluations, lambda e: f"benchmark {e.benchmark}", PER_BENCHMARK)
    lines += _differences(evaluations, system, [(k, k) for k in PER_WORKFLOW])
    return lines


def system(e: Evaluation) -> str:
    """The system an evaluation played, as messages name it: its workflow, and its options if any."""
    options = e.settings.get("workflow_options")
    return f"workflow {e.settings['workflow']}" + (f" {json.dumps(options, sort_keys=True)}" if options else "")


def check_settings(evaluations: list[Evaluation], allow_mixed: bool) -> list[str]:
    """The differences (returned when `allow_mixed`); otherwise the first one is raised."""
    lines = setting_differences(evaluations)
    if lines and not allow_mixed:
        raise ValueError(f"{lines[0]} (pass --allow-mixed to report them together)")
    return lines


def _differences(
    evaluations: list[Evaluation], scope: Callable[[Evaluation], str], keys: list[tuple[str, str]]
) -> list[str]:
    lines = []
    first: dict[tuple[str, str], Evaluation | None] = {}
    for e in evaluations:
        for key, label in keys:
            seen = first.setdefault((scope(e), key), e)
            if seen is not None and seen.settings.get(key) != e.settings.get(key):
                lines.append(
                    f"evaluation setting '{label}' differs ({scope(e)}): {_shown(seen, key)} in {seen.name} "
                    f"vs {_shown(e, key)} in {e.name}"
                )
                first[(scope(e), key)] = None
    return lines


def _shown(e: Evaluation, key: str) -> str:
    if key == "data_sha256":
        return f"{Path(str(e.settings.get('data'))).name} (sha256 {str(e.settings.get(key))[:12]})"
    return repr(e.settings.get(key))
