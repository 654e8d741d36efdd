"""Write the paper's report from a RUNS folder (layout: `verl_masopd/report/__init__.py`).

  python -m verl_masopd.report --runs RUNS --out DIR [--methods a,b,...] [--curve-tag val/accuracy]
      [--allow-mixed] [--reference opd]

DIR/report.md    the main table, one role-specialisation and collaboration table per domain and,
                 when evaluations of the search workflow are among them, the QA tables
                 (qa_systems.py, qa_tables.py: avg@k, pass@k, k/k, sub-EM, relaxed EM, failures
                 and tokens per dataset and Macro, and the paired bootstrap differences of the
                 first system with each other one)
                 and, when --reference (default opd) has evaluations, the main and role tables
                 again as every other method's difference against it, paired by seed, ± its
                 standard error and its 95% t-interval (differences.py)
DIR/report.json  the same numbers (mean, std, n and the seeds' values per cell; the QA tables'
                 values and intervals; the differences) and the curves
DIR/main_table.png  the main table as bars with ± std error bars
DIR/curves.png   --curve-tag against training step per method (mean, ± std band over seeds)

Evaluations with differing settings (sampling, k, horizon, benchmark file) are refused with a
one-line message naming the setting, unless --allow-mixed (then the report lists them).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from verl_masopd.report.consistency import check_settings
from verl_masopd.report.curves import method_curves
from verl_masopd.report.differences import difference_table
from verl_masopd.report.figures import bar_figure, curves_figure, method_colours
from verl_masopd.report.layout import find_evaluations, find_event_files
from verl_masopd.report.markdown import table_markdown
from verl_masopd.report.qa_markdown import qa_markdown
from verl_masopd.report.qa_systems import qa_systems
from verl_masopd.report.qa_tables import qa_tables
from verl_masopd.report.tables import main_table, method_order, role_table


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m verl_masopd.report", description=__doc__.splitlines()[0])
    p.add_argument("--runs", required=True, help="RUNS folder: <method>/seed<k>/{eval,eval-swap,train}/...")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--methods", help="comma-separated methods, in row order (default: all, sorted)")
    p.add_argument("--curve-tag", default="val/accuracy", help="TensorBoard scalar of the training curves")
    p.add_argument("--allow-mixed", action="store_true", help="report evaluations with differing settings")
    p.add_argument("--reference", default="opd", help="method the differences are taken against (default opd)")
    return p


def write_report(
    runs: Path, out: Path, methods: list[str] | None, curve_tag: str, allow_mixed: bool, reference: str = "opd"
) -> dict:
    """Writes the four files of the module docstring; returns report.json's content."""
    evaluations = find_evaluations(runs, methods)
    order = method_order(evaluations, methods)
    differences = check_settings(evaluations, allow_mixed)
    main = main_table(evaluations, order)
    domains = sorted({e.domain for e in evaluations})
    roles = [role_table(evaluations, order, domain) for domain in domains]
    against = [d for t in (main, *roles) if (d := difference_table(t, reference)) is not None]
    systems = qa_systems(evaluations, order)
    qa = qa_tables(systems) if systems else []
    found = method_curves(find_event_files(runs, order), curve_tag)
    curves = {domain: {m: found[domain][m] for m in order if m in found[domain]} for domain in found}
    out.mkdir(parents=True, exist_ok=True)
    colours = method_colours(order)
    bar_figure(main, out / "main_table.png", colours)
    figures = ["main_table.png"]
    if curves:
        curves_figure(curves, curve_tag, out / "curves.png", colours)
        figures.append("curves.png")
    report = {
        "runs": runs.resolve().name,
        "evaluations": [e.name for e in evaluations],
        "setting_differences": differences,
        "main_table": main.as_dict(),
        "role_tables": {domain: t.as_dict() for domain, t in zip(domains, roles, strict=True)},
        "differences": {"reference": reference, "tables": [t.as_dict() for t in against]},
        "qa_systems": list(systems),
        "qa_tables": [t.as_dict() for t in qa],
        "curve_tag": curve_tag,
        "curves": curves,
        "figures": figures,
    }
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "report.md").write_text(report_markdown(report, [main, *roles, *against], qa, curve_tag))
    return report


def report_markdown(report: dict, tables: list, qa: list, curve_tag: str) -> str:
    parts = [f"# Report on {report['runs']}", ""]
    if report["setting_differences"]:
        parts += ["Evaluation settings differ (reported together by --allow-mixed):", ""]
        parts += [f"- {line}" for line in report["setting_differences"]] + [""]
    for table in tables:
        parts += [table_markdown(table)]
    if qa:
        parts += [f"QA of the search systems {', '.join(report['qa_systems'])}, per dataset:", ""]
        parts += [qa_markdown(qa)]
    parts += ["![main table](main_table.png)", ""]
    if "curves.png" in report["figures"]:
        parts += [f"![{curve_tag} against training step](curves.png)", ""]
    else:
        parts += [f"No training log has the scalar '{curve_tag}': no curves.", ""]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    methods = [m for m in args.methods.split(",") if m] if args.methods else None
    try:
        write_report(Path(args.runs), Path(args.out), methods, args.curve_tag, args.allow_mixed, args.reference)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print((Path(args.out) / "report.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
