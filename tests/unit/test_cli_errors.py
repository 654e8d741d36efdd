"""Start-up errors of every command-line entry point: one line naming the culprit and a non-zero
exit, never a traceback; a failed training start leaves no Hydra folder behind."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest

from data_prep.__main__ import main as data_prep_main
from data_prep.schema import qa_row
from data_prep.writer import write_rows
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
    from verl_masopd.config.validate import validate_config
    from verl_masopd.options.errors import ConfigError
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
        Trainer(validate_config(cfg))


@pytest.fixture(scope="module")
def math_rows(tmp_path_factory):
    """A parquet file of 4 math problems and an empty one with the same columns."""
    folder = tmp_path_factory.mktemp("rows")
    data = folder / "math.parquet"
    assert data_prep_main(["builtin", "--domain", "math", "--output", str(data), "--n", "4"]) == 0
    empty = folder / "empty.parquet"
    pd.read_parquet(data).iloc[:0].to_parquet(empty)
    return data, empty


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("algorithm.adv_estimator=bogus", "algorithm.adv_estimator='bogus' is not one of ["),
        ("trainer.resume_mode=bogus", "trainer.resume_mode: must be one of ('auto', 'disable', 'resume_path')"),
        ("trainer.resume_mode=resume_path", "trainer.resume_from_path: trainer.resume_mode=resume_path needs"),
        ("data.train_batch_size=-1", "data.train_batch_size: must be >= 1, got -1"),
        ("data.train_batch_size=5", "data.train_files: 4 problems cannot fill one batch of data.train_batch_size=5"),
        ("EMPTY", "data.train_files: 0 problems cannot fill one batch of data.train_batch_size=2"),
        ("trainer.total_training_steps=many", "trainer.total_training_steps: Value 'many' of type 'str'"),
        ("actor_rollout_ref.actor.ppo_mini_batch_size=0", "actor_rollout_ref.actor.ppo_mini_batch_size: must be >= 1"),
        ("actor_rollout_ref.actor.optim.lr=-1", "actor_rollout_ref.actor.optim.lr: must be a finite number > 0"),
        ("actor_rollout_ref.actor.grad_clip=0", "actor_rollout_ref.actor.grad_clip: must be a finite number > 0"),
        ("actor_rollout_ref.rollout.top_p=2", "actor_rollout_ref.rollout.top_p: must be in (0, 1], got 2.0"),
        ("actor_rollout_ref.rollout.val_kwargs.temperature=-1", "actor_rollout_ref.rollout.val_kwargs.temperature:"),
        ("engines.dtype=float8", "engines.dtype: must be one of ('float32', 'bfloat16'), got 'float8'"),
        ("trainer.device=tpu", "trainer.device: must be one of ('cpu', 'cuda', 'npu'), got 'tpu'"),
        ("workflow.options.foo=1", "Could not override 'workflow.options.foo'. To append to your config use +workflow"),
        ("preset=nowhere", "In 'masopd_trainer': Could not find 'preset/nowhere' Available options in 'preset':"),
        ("teacher.source=copy", "teacher.source: must be one of ('path', 'frozen', 'live'), got 'copy'"),
        ("teacher.privileged=solution", "teacher.privileged: must be null or reference, got 'solution'"),
        ("algorithm.adv_estimator=opd", "teacher.model_path is required by algorithm.adv_estimator=opd"),
    ],
)
def test_training_start_errors_are_one_line_naming_the_key(
    override, message, math_rows, tiny_model_path, tmp_path, monkeypatch, capsys
):
    from verl_masopd.train import main as train_main

    data, empty = math_rows
    run_dir = tmp_path / "runs" / "a" / "b"
    (tmp_path / "runs").mkdir()
    argv = [
        "train",
        "preset=cpu",
        "workflow.domain=math",
        "algorithm.adv_estimator=grpo",
        "data.train_batch_size=2",
        f"students.path={tiny_model_path}",
        f"data.train_files=[{empty if override == 'EMPTY' else data}]",
        f"trainer.default_local_dir={tmp_path / 'checkpoints'}",
        f"hydra.run.dir={run_dir}",
    ]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", argv + ([] if override == "EMPTY" else [override]))
    with pytest.raises(SystemExit) as stop:
        train_main()
    assert stop.value.code == 2
    assert one_line(capsys.readouterr().err).startswith(f"config error: {message}")
    # the folders Hydra made for the run are gone, the one that was there stays
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]
    assert list((tmp_path / "runs").iterdir()) == []


def _run_module(cwd, module: str, *arguments: str) -> subprocess.CompletedProcess:
    """`python -m module arguments` in a fresh process, as a user starts it."""
    return subprocess.run(
        [sys.executable, "-m", module, *arguments],
        cwd=cwd,
        env={**os.environ, "VERL_PLATFORM": "cpu"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_failed_training_start_prints_its_error_alone(tmp_path):
    """In a fresh process: nothing verl announces while it is imported comes before the error."""
    done = _run_module(tmp_path, "verl_masopd.train", "preset=cpu", "algorithm.adv_estimator=bogus")
    assert done.returncode == 2
    assert one_line(done.stderr).startswith("config error: algorithm.adv_estimator='bogus' is not one of")
    assert list(tmp_path.iterdir()) == []


def test_eval_prints_its_start_up_error_alone(tmp_path):
    missing = tmp_path / "none.parquet"
    done = _run_module(tmp_path, "verl_masopd.eval", "--data", str(missing), "--model", str(tmp_path), "--out", "x")
    assert done.returncode == 2
    assert one_line(done.stderr) == f"error: --data {missing}: file not found"


@pytest.fixture
def qa_data(tmp_path):
    rows = [
        qa_row(data_source="toy", uid="q0", split="test", question="Capital of Arland?", answers=["Bex"], metadata={})
    ]
    write_rows(rows, tmp_path / "qa.parquet")
    return str(tmp_path / "qa.parquet")


@pytest.mark.parametrize(
    "options, message",
    [
        (["max_waves"], "error: --workflow-option 'max_waves': expected KEY=VALUE"),
        (["colour=red"], "error: workflow 'search' (qa): unknown option(s) ['colour']"),
        (["max_waves=two"], "error: workflow 'search' options {'max_waves': 'two'"),
        (["max_waves=0"], "error: workflow.options.max_waves: must be >= 1, got 0"),
        ([], "error: workflow.options.retriever: give one of: an http(s) URL of a retrieval server; a BM25"),
        (["retriever=/no/index"], "error: workflow.options.retriever: /no/index is none of: an http(s) URL"),
        (
            ["retriever=http://127.0.0.1:9/retrieve", "search_timeout_s=2"],
            "error: workflow.options.retriever: retrieval server http://127.0.0.1:9/retrieve is not usable",
        ),
    ],
)
def test_eval_search_start_up_errors_are_one_line(qa_data, tmp_path, capsys, options, message):
    flags = [x for option in options for x in ("--workflow-option", option)]
    argv = ["--data", qa_data, "--model", str(tmp_path), "--workflow", "search", "--horizon", "8", *flags]
    assert eval_main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert one_line(capsys.readouterr().err).startswith(message)
    assert not (tmp_path / "out").exists()


def test_eval_search_needs_every_question_s_dataset(retrieval_index, tmp_path, capsys):
    row = qa_row(data_source="toy", uid="q0", split="test", question="Capital of Arland?", answers=["Bex"], metadata={})
    pd.DataFrame([{**row, "data_source": ""}]).to_parquet(tmp_path / "qa.parquet")
    argv = ["--data", str(tmp_path / "qa.parquet"), "--model", str(tmp_path), "--workflow", "search", "--horizon", "8"]
    assert eval_main([*argv, "--workflow-option", f"retriever={retrieval_index}", "--out", str(tmp_path / "o")]) == 2
    assert one_line(capsys.readouterr().err) == (
        f"error: {tmp_path / 'qa.parquet'}: problem 'q0' has no data_source (the dataset of its QA attempts)"
    )


def test_data_prep_names_a_file_that_is_not_text(tmp_path, capsys):
    binary = tmp_path / "release.jsonl"
    binary.write_bytes(bytes(range(128, 256)) * 8)
    for source in ("aime24", "polaris", "codecontests"):
        assert data_prep_main([source, "--input", str(binary), "--output", str(tmp_path / "x.parquet")]) == 2
        err = capsys.readouterr().err
        # the progress bar is cleared before the error: what a terminal shows is the error alone
        assert err.rsplit("\r", 1)[-1].strip() == f"error: {binary}: not UTF-8 text (byte 0x80 cannot be decoded)"
    assert not (tmp_path / "x.parquet").exists()
