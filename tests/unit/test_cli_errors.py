"""Start-up errors of every command-line entry point: one line naming the culprit and a non-zero
exit, never a traceback; a failed training start leaves no Hydra folder behind."""

from __future__ import annotations

import sys

import pandas as pd
import pytest

from data_prep.__main__ import main as data_prep_main
from verl_masopd.eval.__main__ import main as eval_main
from verl_masopd.verify.__main__ import main as verify_main


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


@pytest.mark.parametrize(
    "argv, printed",
    [
        (["math", "-2,0,2", "-2,0,2"], "true"),
        (["math", "-2", "-2.0", "--timeout", "5"], "true"),
        (["math", "--timeout=5", "-(n-1) / 2", "\\frac{1-n}{2}"], "true"),
        (["math", "--", "-2", "-3"], "false"),
    ],
)
def test_verify_takes_answers_starting_with_a_minus(argv, printed, capsys):
    assert verify_main(argv) == 0
    assert capsys.readouterr().out.strip() == printed


@pytest.mark.parametrize("timeout", ["0", "-5", "nan", "inf", "soon"])
def test_verify_refuses_a_bad_timeout(timeout, capsys):
    with pytest.raises(SystemExit) as stop:
        verify_main(["math", "1", "1", "--timeout", timeout])
    assert stop.value.code == 2
    assert "--timeout" in capsys.readouterr().err.strip().splitlines()[-1]


def test_eval_names_missing_data_and_missing_checkpoint(tmp_path, capsys):
    out = str(tmp_path / "out")
    missing = str(tmp_path / "nowhere.parquet")
    assert eval_main(["--data", missing, "--model", str(tmp_path), "--out", out]) == 2
    assert one_line(capsys.readouterr().err) == f"error: --data {missing}: file not found"

    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    assert eval_main(["--data", str(junk), "--model", str(tmp_path), "--out", out]) == 2
    assert one_line(capsys.readouterr().err).startswith(f"error: --data {junk}: not a readable parquet file")

    data = tmp_path / "math.parquet"
    assert data_prep_main(["builtin", "--domain", "math", "--output", str(data), "--n", "2"]) == 0
    capsys.readouterr()
    checkpoint = str(tmp_path / "no-checkpoint")
    assert eval_main(["--data", str(data), "--model", checkpoint, "--out", out]) == 2
    assert checkpoint in one_line(capsys.readouterr().err)
    assert eval_main(["--data", str(data), "--checkpoint", checkpoint, "--out", out]) == 2
    assert one_line(capsys.readouterr().err).startswith(f"error: --checkpoint {checkpoint}: neither a checkpoint")
    assert eval_main(["--data", str(data), "--out", out]) == 2
    assert one_line(capsys.readouterr().err) == "error: give --checkpoint or --model"
    assert not (tmp_path / "out").exists()


def test_data_prep_refuses_bad_timeouts_and_unwritable_outputs(tmp_path, capsys):
    for timeout in ("0", "nan", "inf", "-1"):
        with pytest.raises(SystemExit) as stop:
            data_prep_main(["check-solutions", str(tmp_path / "x.parquet"), "--timeout", timeout])
        assert stop.value.code == 2
    capsys.readouterr()
    (tmp_path / "a-file").write_text("")
    output = tmp_path / "a-file" / "x.parquet"
    assert data_prep_main(["builtin", "--domain", "math", "--output", str(output)]) == 2
    assert str(output.parent) in one_line(capsys.readouterr().err)


def test_failed_training_start_is_one_line_and_leaves_no_outputs_folder(tmp_path, monkeypatch, capsys):
    from verl_masopd.train import main as train_main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train", "preset=cpu", f"students.path={tmp_path / 'no-model'}"])
    with pytest.raises(SystemExit) as stop:
        train_main()
    assert stop.value.code == 2
    assert one_line(capsys.readouterr().err).startswith("config error: ")
    assert list(tmp_path.iterdir()) == []


def test_a_bad_training_data_file_is_a_config_error(tmp_path, tiny_model_path):
    from verl_masopd.config import compose_config
    from verl_masopd.trainer.config import ConfigError
    from verl_masopd.trainer.loop import Trainer

    data = tmp_path / "rows.parquet"
    pd.DataFrame({"colour": ["red"]}).to_parquet(data)
    cfg = compose_config(
        [
            "preset=cpu",
            "algorithm.adv_estimator=grpo",
            f"students.path={tiny_model_path}",
            f"data.train_files=[{data}]",
            "workflow.domain=math",
        ]
    )
    with pytest.raises(ConfigError, match="data.train_files: "):
        Trainer(cfg)
