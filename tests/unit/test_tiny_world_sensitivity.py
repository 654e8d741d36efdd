"""The sensitivity study's grid and its choice on validation, from hand-made cell results."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import tiny_world_sensitivity as study  # noqa: E402

DOMAINS, SEEDS = ["math", "code"], [0, 1]


def cell(method, setting, domain, seed, validation, test):
    return {
        "method": method,
        "setting": setting,
        "domain": domain,
        "seed": seed,
        "validation_accuracy": validation,
        "test_accuracy": test,
        "diagnostics": {},
    }


def test_the_ras_grid_runs_beta_zero_once_per_learning_rate():
    grid = study.ras_settings()
    assert len(grid) == 18 and len({s.name for s in grid}) == 18
    assert [s.name for s in grid[:3]] == ["beta0_clip5_lr3e-4", "beta0_clip5_lr1e-3", "beta0.1_clip1_lr3e-4"]
    assert grid[2].overrides == (
        "algorithm.masopd.ras_coef=0.1",
        "algorithm.masopd.ras_clip=1",
        "actor_rollout_ref.actor.optim.lr=3e-4",
    )
    assert [s.overrides for s in study.settings_of("opd", None)] == [
        ("actor_rollout_ref.actor.optim.lr=3e-4",),
        ("actor_rollout_ref.actor.optim.lr=1e-3",),
    ]
    assert study.settings_of("masopd-no-pac", None) == []
    no_pac = study.settings_of("masopd-no-pac", grid[2])
    assert [s.name for s in no_pac] == ["beta0.1_clip1_lr3e-4", "beta0.1_clip1_lr1e-3"]
    assert no_pac[1].overrides[:2] == grid[2].overrides[:2] and no_pac[1].overrides[2].endswith("=1e-3")


def test_the_choice_is_the_best_complete_setting_on_validation_averaged_over_domains():
    grid = study.ras_settings()
    a, b, c = grid[0].name, grid[1].name, grid[2].name
    cells = []
    for seed in SEEDS:
        # a: math 0.5, code 0.3 -> 0.4; b: math 0.2, code 0.8 -> 0.5 but a worse test score; c incomplete
        cells += [cell("masopd", a, "math", seed, 0.5, 0.9), cell("masopd", a, "code", seed, 0.3, 0.9)]
        cells += [cell("masopd", b, "math", seed, 0.2 + 0.1 * seed, 0.1), cell("masopd", b, "code", seed, 0.75, 0.1)]
    cells += [cell("masopd", c, "math", 0, 1.0, 1.0), cell("masopd", c, "code", 0, 1.0, 1.0)]
    chosen = study.choose(cells, "masopd", grid, DOMAINS, SEEDS)
    assert chosen["setting"] == b
    assert chosen["validation"] == pytest.approx(((0.2 + 0.3) / 2 + 0.75) / 2)
    assert chosen["test"] == pytest.approx(0.1)
    tie = [dict(x, validation_accuracy=0.5) for x in cells if x["setting"] in (a, b)]
    assert study.choose(tie, "masopd", grid, DOMAINS, SEEDS)["setting"] == a
    assert study.choose(cells, "masopd", grid, DOMAINS, [0, 1, 2]) == {"setting": None}


def test_the_summary_tables_every_cell_and_the_next_cells_follow_the_choice(tmp_path):
    grid = study.ras_settings()
    for setting in grid:
        for domain in DOMAINS:
            for seed in SEEDS:
                value = 0.6 if setting.name == "beta0.5_clip1_lr1e-3" else 0.25
                c = cell("masopd", setting.name, domain, seed, value, value / 2)
                path = study.cell_path(tmp_path, domain, "masopd", setting, seed)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(c))
    summary = study.summarise(study.read_cells(tmp_path), DOMAINS, SEEDS)
    assert summary["chosen"]["masopd"]["setting"] == "beta0.5_clip1_lr1e-3"
    assert summary["chosen"]["opd"] == {"setting": None}
    cure = [cell("cure", f"lr{lr}", "code", seed, v, v) for lr, v in (("3e-4", 0.2), ("1e-3", 0.4)) for seed in SEEDS]
    with_cure = study.summarise([*study.read_cells(tmp_path), *cure], DOMAINS, SEEDS)
    assert with_cure["chosen"]["cure"]["setting"] == "lr1e-3"  # code only: complete without math
    assert study.summarise(cure, ["math"], SEEDS)["chosen"]["cure"] == {"setting": None}  # no domain of its own
    assert summary["chosen"]["masopd-no-ras"]["setting"] == "beta0_clip5_lr3e-4"  # the first of the tied β = 0
    # every other setting minus the chosen one, paired by seed: 0.25 − 0.6 at both seeds
    d = summary["differences"]["masopd beta0_clip5_lr3e-4"]["math validation"]
    assert d["mean"] == pytest.approx(-0.35) and d["se"] == pytest.approx(0.0) and d["seeds"] == [0, 1]
    assert "beta0.5_clip1_lr1e-3" not in " ".join(summary["differences"])  # the choice itself has none
    markdown = study.summary_markdown(summary)
    assert "| masopd | beta0.5_clip1_lr1e-3 | 60.0 ± 0.0 (n=2) | 60.0 ± 0.0 (n=2) | 30.0 ± 0.0 (n=2) |" in markdown
    assert "- masopd: beta0.5_clip1_lr1e-3 (validation 60.0, test 30.0)" in markdown
    assert f"at {study.OLD_DEFAULT} and beta0.5_clip1_lr1e-3:" in markdown  # the diagnostics, old and chosen
    partial = [c for c in study.read_cells(tmp_path) if c["setting"] != "beta0_clip5_lr3e-4" or c["seed"] == 0]
    assert study.summarise(partial, DOMAINS, SEEDS)["chosen"]["masopd"] == {"setting": None}  # grid incomplete
    args = study.build_parser().parse_args(["--methods", "masopd,masopd-no-pac,cure"])
    pending = study.pending_cells(args, tmp_path, DOMAINS, SEEDS)
    assert {(d, m, s.name) for d, m, s, _ in pending} == {
        *((d, "masopd-no-pac", f"beta0.5_clip1_lr{lr}") for d in DOMAINS for lr in ("3e-4", "1e-3")),
        *(("code", "cure", f"lr{lr}") for lr in ("3e-4", "1e-3")),
    }
    assert len(pending) == 12


def test_the_diagnostics_table_averages_each_setting_over_seeds_per_role_and_token_class():
    def diag(opd, ras, share, entropy):
        return {
            "masopd/reasoner/opd_term": opd,
            "masopd/reasoner/ras_term": ras,
            "masopd/reasoner/clip_share": share,
            "actor/reasoner/entropy": entropy,
            "masopd/reasoner/content/ras_term": 2 * ras,
        }

    cells = [
        {**cell("masopd", "old", "math", 0, 0, 0), "diagnostics": diag(-0.2, 1.0, 0.3, 0.4)},
        {**cell("masopd", "old", "math", 1, 0, 0), "diagnostics": diag(-0.4, 2.0, 0.1, 0.2)},
        {**cell("masopd", "new", "math", 0, 0, 0), "diagnostics": diag(-1.0, 0.5, 0.2, 0.3)},
        {**cell("opd", "new", "math", 0, 0, 0), "diagnostics": diag(9.0, 9.0, 9.0, 9.0)},
    ]
    lines = study.diagnostics_markdown(cells, ["math"], ("old", "new")).splitlines()
    assert "| math | reasoner | all | -0.300 | -1.000 | +1.500 | +0.500 | 0.200 | 0.200 | 0.300 | 0.300 |" in lines
    assert "| math | reasoner | content | — | — | +3.000 | +1.000 | — | — | — | — |" in lines
    assert sum(line.startswith("| math | reasoner |") for line in lines) == len(study.TOKEN_CLASSES)
