"""The report from small hand-made evaluation outputs and TensorBoard logs: exact mean ± std,
missing cells, best marked, role table, refusal of mixed settings, figures written."""

import math
import statistics
import subprocess
import sys

import pytest
from PIL import Image
from torch.utils.tensorboard import SummaryWriter

from verl_masopd.eval.qa_attempts import QA_ATTEMPTS_FILE, QaAttempt, write_attempts
from verl_masopd.eval.settings import write_settings
from verl_masopd.report.__main__ import write_report
from verl_masopd.report.figures import method_colours
from verl_masopd.rollout.summary import write_summary

SETTINGS = {
    "data": "/data/b.parquet",
    "limit": None,
    "problems": 4,
    "workflow": "mas",
    "horizon": 2,
    "agents_per_role": 1,
    "k": 2,
    "temperature": 0.6,
    "top_p": 0.95,
    "top_k": 20,
    "max_new_tokens": 64,
    "teacher": None,
    "seed": 0,
}
DOMAIN_OF = {"m1": "math", "m2": "math", "c1": "code", "nq": "qa"}


def add_eval(runs, method, seed, bench, accuracy, swapped=False, summary=None, **settings):
    folder = runs / method / f"seed{seed}" / ("eval-swap" if swapped else "eval") / bench
    folder.mkdir(parents=True)
    row = {"problems": 4, "episodes": 8, "accuracy": accuracy, "agreement@0": 0.5, "agreement@1": float("nan")}
    write_summary({**row, **(summary or {})}, folder)
    base = {**SETTINGS, "domain": DOMAIN_OF[bench], "data_sha256": f"sha-{bench}", "swap_roles": swapped}
    write_settings({**base, **settings}, folder)


def log_curve(runs, method, seed, values):
    writer = SummaryWriter(str(runs / method / f"seed{seed}" / "train" / "math" / "checkpoints" / "tensorboard"))
    for step, value in enumerate(values):
        writer.add_scalar("val/accuracy", value, step)
    writer.close()


@pytest.fixture
def runs(tmp_path):
    """masopd: 3 seeds on m1, m2, c1; grpo: 2 seeds, m1 only (m2, c1 missing); sa: 1 seed on m1, m2."""
    runs = tmp_path / "runs"
    for seed, (m1, m2, c1) in enumerate([(0.5, 0.25, 0.125), (0.75, 0.5, 0.25), (0.25, 0.5, 0.375)]):
        add_eval(runs, "masopd", seed, "m1", m1)
        add_eval(runs, "masopd", seed, "m2", m2)
        add_eval(runs, "masopd", seed, "c1", c1)
    add_eval(runs, "grpo", 0, "m1", 0.75)
    add_eval(runs, "grpo", 1, "m1", 0.625)
    add_eval(runs, "sa", 0, "m1", 0.125, workflow="sa", horizon=1)
    add_eval(runs, "sa", 0, "m2", 0.125, workflow="sa", horizon=1)
    return runs


def test_main_table_mean_std_missing_and_best(runs, tmp_path):
    report = write_report(runs, tmp_path / "out", ["masopd", "grpo", "sa"], "val/accuracy", False)
    table = report["main_table"]
    assert table["columns"] == ["c1", "code avg", "m1", "m2", "math avg"]
    rows = table["rows"]
    m1 = rows["masopd"]["m1"]
    assert m1["values"] == [0.5, 0.75, 0.25] and m1["n"] == 3
    assert m1["mean"] == pytest.approx(0.5) and m1["std"] == pytest.approx(statistics.stdev([0.5, 0.75, 0.25]))
    # a seed's domain average, then mean ± std over seeds
    avg = [(0.5 + 0.25) / 2, (0.75 + 0.5) / 2, (0.25 + 0.5) / 2]
    assert rows["masopd"]["math avg"]["values"] == pytest.approx(avg)
    assert rows["masopd"]["math avg"]["mean"] == pytest.approx(statistics.fmean(avg))
    # grpo lacks m2 and c1: missing, and so is its math average; never zero
    assert rows["grpo"]["m2"] is None and rows["grpo"]["c1"] is None and rows["grpo"]["math avg"] is None
    assert rows["grpo"]["m1"]["mean"] == pytest.approx(0.6875)
    # one seed: no std
    assert rows["sa"]["m1"] == {"mean": 0.125, "std": None, "n": 1, "values": [0.125], "seeds": [0]}
    assert list(report["role_tables"]["code"]["rows"]) == ["masopd"]
    assert table["best"] == {"c1": ["masopd"], "code avg": ["masopd"], "m1": ["grpo"], "m2": ["masopd"],
                             "math avg": ["masopd"]}  # fmt: skip
    md = (tmp_path / "out" / "report.md").read_text()
    grpo = next(line for line in md.splitlines() if line.startswith("| grpo |"))
    std = 100 * statistics.stdev([0.75, 0.625])
    assert grpo == f"| grpo | 2 | — | — | **68.8 ± {std:.1f}** | — | — |"
    sa = next(line for line in md.splitlines() if line.startswith("| sa |") and "12.5" in line)
    assert sa == "| sa | 1 | — | — | 12.5 | 12.5 | 12.5 |"


def test_differences_against_a_reference_paired_by_seed(runs, tmp_path):
    report = write_report(runs, tmp_path / "out", None, "val/accuracy", False, reference="grpo")
    [main, *_] = report["differences"]["tables"]
    cell = main["rows"]["masopd"]["m1"]
    # seeds 0 and 1 in common (masopd's seed 2 has no pair): d = 0.5 − 0.75, 0.75 − 0.625
    d = [-0.25, 0.125]
    se = statistics.stdev(d) / math.sqrt(2)
    assert cell["mean"] == pytest.approx(-0.0625) and cell["std"] == pytest.approx(se) and cell["n"] == 2
    assert cell["values"] == pytest.approx(d) and cell["seeds"] == [0, 1]
    half = 12.706205 * se  # t_{0.975, 1}
    assert cell["interval"] == pytest.approx([-0.0625 - half, -0.0625 + half], abs=1e-5)
    assert main["rows"]["sa"]["m1"] is None and main["rows"]["masopd"]["m2"] is None  # one seed; no grpo on m2
    assert "grpo" not in main["rows"] and main["kinds"]["m1"] == "points"
    md = (tmp_path / "out" / "report.md").read_text()
    assert "difference against grpo, paired by seed (± standard error [95% t-interval])" in md
    assert f"-6.2 ± {100 * se:.1f} [{100 * (-0.0625 - half):+.1f}, {100 * (-0.0625 + half):+.1f}]" in md
    assert write_report(runs, tmp_path / "none", None, "val/accuracy", False)["differences"]["tables"] == []


def test_role_table_from_summaries(tmp_path):
    runs = tmp_path / "runs"
    role_keys = {"format_violations/reasoner": 0.25, "format_violations/tool_user": 0.5, "revise_rate_at_fault": 0.5}
    add_eval(runs, "masopd", 0, "m1", 0.5, summary={**role_keys, "role_advantage/reasoner": 0.2})
    add_eval(runs, "masopd", 0, "m2", 0.25, summary={**role_keys, "role_advantage/reasoner": 0.4})
    add_eval(runs, "masopd", 1, "m1", 0.75, summary={**role_keys, "role_advantage/reasoner": -0.1})
    add_eval(runs, "masopd", 0, "m1", 0.25, swapped=True)
    add_eval(runs, "masopd", 1, "m1", 0.25, swapped=True)
    report = write_report(runs, tmp_path / "out", None, "val/accuracy", False)
    row = report["role_tables"]["math"]["rows"]["masopd"]
    # seed 0: mean over m1, m2 = 0.3; seed 1: -0.1
    assert row["Δ reasoner"]["values"] == pytest.approx([0.3, -0.1])
    assert row["Δ tool_user"] is None
    # swap drop only where a swapped evaluation exists: seed 0 m1 0.5 − 0.25, seed 1 0.75 − 0.25
    assert row["swap drop"]["values"] == pytest.approx([0.25, 0.5])
    assert row["agreement@0"]["values"] == [0.5, 0.5] and row["agreement@1"] is None
    assert row["format violations tool_user"]["mean"] == 0.5 and row["revise at fault"]["std"] == 0.0
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| masopd | 2 | +0.100 ± 0.283 | — | +37.5 ± 17.7 | 50.0 ± 0.0 | — |" in md


def test_mixed_settings_refused_with_the_setting_named(runs, tmp_path):
    add_eval(runs, "opd", 0, "m1", 0.5, k=4)
    done = subprocess.run(
        [sys.executable, "-m", "verl_masopd.report", "--runs", str(runs), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and not (tmp_path / "o").exists()
    [line] = done.stderr.strip().splitlines()
    assert "'k'" in line and "opd/seed0/eval/m1" in line and "--allow-mixed" in line
    report = write_report(runs, tmp_path / "o", None, "val/accuracy", True)
    assert len(report["setting_differences"]) == 1
    assert "Evaluation settings differ" in (tmp_path / "o" / "report.md").read_text()


@pytest.mark.parametrize(
    "change,named",
    [
        ({"data_sha256": "other"}, "'benchmark file' differs (benchmark m1)"),
        ({"horizon": 4}, "'horizon' differs (workflow mas)"),
        ({"temperature": 1.0}, "'temperature'"),
    ],
)
def test_each_setting_is_checked(runs, tmp_path, change, named):
    add_eval(runs, "opd", 0, "m1", 0.5, **change)
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(")", r"\)")):
        write_report(runs, tmp_path / "o", None, "val/accuracy", False)


def test_figures_and_curves(runs, tmp_path):
    log_curve(runs, "masopd", 0, [0.0, 0.25, 0.5])
    log_curve(runs, "masopd", 1, [0.0, 0.5, 1.0])
    log_curve(runs, "grpo", 0, [0.0, 0.125])
    out = tmp_path / "out"
    report = write_report(runs, out, None, "val/accuracy", False)
    curve = report["curves"]["math"]["masopd"]
    assert curve["steps"] == [0, 1, 2] and curve["seeds"] == [0, 1]
    assert curve["mean"] == pytest.approx([0.0, 0.375, 0.75])
    assert curve["std"] == pytest.approx([0.0, statistics.stdev([0.25, 0.5]), statistics.stdev([0.5, 1.0])])
    assert report["curves"]["math"]["grpo"]["std"] == [None, None]
    for name in ("curves.png", "main_table.png"):
        with Image.open(out / name) as image:
            assert image.format == "PNG" and image.size[0] > 500 and image.size[1] > 300
    assert "![val/accuracy against training step](curves.png)" in (out / "report.md").read_text()


def test_a_method_keeps_its_colour_and_the_report_names_no_absolute_path(runs, tmp_path):
    """grpo has no code evaluation: the methods after it keep their colours in the code panel all
    the same, and report.md / report.json name the runs folder by its name only."""
    log_curve(runs, "masopd", 0, [0.0, 0.25])
    writer = SummaryWriter(str(runs / "masopd" / "seed0" / "train" / "code" / "checkpoints" / "tensorboard"))
    writer.add_scalar("val/accuracy", 0.5, 0)
    writer.close()
    colours = method_colours(["grpo", "masopd", "sa"])
    assert len(set(colours.values())) == 3
    assert method_colours(["masopd"])["masopd"] != colours["masopd"]
    report = write_report(runs, tmp_path / "out", ["grpo", "masopd", "sa"], "val/accuracy", False)
    assert report["runs"] == "runs" and sorted(report["curves"]) == ["code", "math"]
    for name in ("report.md", "report.json"):
        assert str(tmp_path) not in (tmp_path / "out" / name).read_text()
    add_eval(runs, "opd", 0, "m1", 0.5, data="/data/other/b.parquet", data_sha256="other")
    report = write_report(runs, tmp_path / "mixed", None, "val/accuracy", True)
    assert "b.parquet (sha256 other)" in report["setting_differences"][0]
    assert "/data/" not in report["setting_differences"][0]


def test_methods_limit_what_is_read_and_order_the_curves(runs, tmp_path):
    """--methods reads only those methods' folders (another's half-written evaluation is not
    touched) and orders the curves' methods as the tables' rows."""
    (runs / "partial" / "seed0" / "eval" / "m1").mkdir(parents=True)
    log_curve(runs, "partial", 0, [0.0, 1.0])
    log_curve(runs, "masopd", 0, [0.0, 0.25])
    log_curve(runs, "grpo", 0, [0.0, 0.125])
    with pytest.raises(ValueError, match="partial/seed0/eval/m1/summary.csv: missing"):
        write_report(runs, tmp_path / "all", None, "val/accuracy", False)
    report = write_report(runs, tmp_path / "out", ["masopd", "grpo"], "val/accuracy", False)
    assert list(report["main_table"]["rows"]) == ["masopd", "grpo"]
    assert list(report["curves"]["math"]) == ["masopd", "grpo"]


CASCADED = {"retriever": "/index", "system": "cascaded"}
HIERARCHICAL = {"retriever": "/index", "max_waves": 1}


def add_search_eval(runs, method, seed, ems, swapped=False, **settings):
    """A search evaluation on nq: question i's 2 attempts scored ems[i] ("10": attempt 0 right)."""
    attempts = [
        QaAttempt("nq", f"q{i}", j, e == "1", e == "1", e == "1", None if e == "1" else "untagged", 10 + j, 100)
        for i, pair in enumerate(ems)
        for j, e in enumerate(pair)
    ]
    accuracy = sum(a.em for a in attempts) / len(attempts)
    options = {"workflow": "search", "horizon": 4, "workflow_options": HIERARCHICAL, **settings}
    add_eval(runs, method, seed, "nq", accuracy, swapped=swapped, **options)
    write_attempts(
        attempts, runs / method / f"seed{seed}" / ("eval-swap" if swapped else "eval") / "nq" / QA_ATTEMPTS_FILE
    )


def test_qa_tables_from_the_search_evaluations(runs, tmp_path):
    """One QA system per method, per method and seed where a method has several; eval-swap and
    the evaluations of other workflows hold no attempts. The cascaded system's horizon (2) is
    compared with no other: its options make it another system."""
    assert write_report(runs, tmp_path / "plain", None, "val/accuracy", False)["qa_tables"] == []
    add_search_eval(runs, "cascaded", 0, ["11", "10", "00", "11"], horizon=2, workflow_options=CASCADED)
    add_search_eval(runs, "cascaded", 0, ["00", "00", "00", "00"], swapped=True, horizon=2, workflow_options=CASCADED)
    add_search_eval(runs, "search", 0, ["10", "00", "00", "11"])
    add_search_eval(runs, "search", 1, ["11", "01", "00", "00"])
    report = write_report(runs, tmp_path / "out", None, "val/accuracy", False)
    assert report["setting_differences"] == [] and report["qa_systems"] == ["cascaded", "search/seed0", "search/seed1"]
    tables = {t["title"].split(":")[0]: t for t in report["qa_tables"]}
    assert tables["avg@2"]["rows"]["cascaded"] == {"nq": 5 / 8, "Macro": 5 / 8}
    assert tables["pass@2"]["rows"]["search/seed1"]["nq"] == 2 / 4
    assert tables["untagged"]["rows"]["search/seed0"]["nq"] == 5
    assert tables["tokens generated"]["rows"]["cascaded"]["nq"] == 10.5
    difference = tables["cascaded − search/seed0"]["rows"]["avg@2"]["nq"]
    assert difference["difference"] == pytest.approx(5 / 8 - 3 / 8)
    assert "cascaded − search/seed1" in tables
    assert report["main_table"]["rows"]["cascaded"]["nq"]["mean"] == 5 / 8
    md = (tmp_path / "out" / "report.md").read_text()
    assert "QA of the search systems cascaded, search/seed0, search/seed1, per dataset:" in md
    assert "| cascaded | **62.5** | **62.5** |" in md
    assert "| avg@2 | +25.0 [" in md


def test_a_search_evaluation_needs_its_attempts(tmp_path):
    runs = tmp_path / "runs"
    add_search_eval(runs, "search", 0, ["10"])
    (runs / "search" / "seed0" / "eval" / "nq" / QA_ATTEMPTS_FILE).unlink()
    with pytest.raises(ValueError, match=f"search/seed0/eval/nq/{QA_ATTEMPTS_FILE}: missing"):
        write_report(runs, tmp_path / "out", None, "val/accuracy", False)


def test_the_horizon_is_compared_within_one_system(tmp_path):
    runs = tmp_path / "runs"
    add_search_eval(runs, "a", 0, ["10"])
    add_search_eval(runs, "b", 0, ["10"], horizon=8)
    with pytest.raises(ValueError, match=r"'horizon' differs \(workflow search \{\"max_waves\": 1, \"retriever\""):
        write_report(runs, tmp_path / "out", None, "val/accuracy", False)
