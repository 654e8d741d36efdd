"""The start-up check of the run's model folders on real tokenizers (the tiny world's byte-level one
and SmolLM2's BPE one), each mismatch made in a copy: one ConfigError line naming the folders and
the difference."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from verl_masopd.config_errors import ConfigError
from verl_masopd.eval.__main__ import main as eval_main
from verl_masopd.trainer.model_conventions import check_model_conventions

pytestmark = pytest.mark.integration

TINY = Path(__file__).resolve().parents[2] / "verl_masopd" / "tiny_world" / "weights" / "math"
FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def copy(source: str | Path, target: Path) -> Path:
    """The folder's config and tokenizer files (no weights: the check reads none)."""
    target.mkdir()
    for name in FILES:
        if (Path(source) / name).is_file():
            shutil.copyfile(Path(source) / name, target / name)
    return target


def edit_json(path: Path, **values) -> None:
    data = json.loads(path.read_text())
    data.update(values)
    path.write_text(json.dumps(data))


def refusal(folders: dict[str, str], teacher_key: str | None = "teacher.model_path") -> str:
    with pytest.raises(ConfigError) as raised:
        check_model_conventions(folders, teacher_key)
    message = str(raised.value)
    assert "\n" not in message
    return message


def test_matching_folders_pass(smollm2_path):
    check_model_conventions({"students.path": smollm2_path, "teacher.model_path": smollm2_path}, "teacher.model_path")
    tiny = {"students.path": str(TINY / "student"), "teacher.model_path": str(TINY / "teacher")}
    check_model_conventions(tiny, "teacher.model_path")


def test_the_converters_swapped_eos_is_named(smollm2_path, tmp_path):
    swapped = copy(smollm2_path, tmp_path / "swapped")
    edit_json(swapped / "tokenizer_config.json", eos_token="<|im_start|>")
    message = refusal({"students.path": str(swapped)}, None)
    assert message == (
        f"students.path: the tokenizer at {swapped} says eos [1 '<|im_start|>'] but its generation config says "
        "[2 '<|im_end|>']; set the tokenizer's eos_token to the generation config's"
    )


def test_a_folder_without_a_chat_template_is_refused(tmp_path):
    bare = copy(TINY / "student", tmp_path / "bare")
    (bare / "chat_template.jinja").unlink()
    message = refusal({"students.path": str(bare), "teacher.model_path": str(TINY / "teacher")})
    assert message == (
        f"students.path: the tokenizer at {bare} has no chat template; contexts are rendered with the model's "
        "chat template"
    )


def test_a_pad_the_template_emits_is_refused_but_pad_equal_to_eos_passes(smollm2_path, tmp_path):
    header_pad = copy(smollm2_path, tmp_path / "header_pad")
    edit_json(header_pad / "tokenizer_config.json", pad_token="<|im_start|>")
    message = refusal({"teacher.model_path": str(header_pad)})
    assert message.startswith(f"teacher.model_path: the pad id of {header_pad}, [1 '<|im_start|>'], occurs in")
    tiny_pad = copy(TINY / "student", tmp_path / "tiny_pad")
    edit_json(tiny_pad / "tokenizer_config.json", pad_token="<|im_start|>")
    assert "[1 '<|im_start|>'], occurs in chat-formatted contexts" in refusal({"students.path": str(tiny_pad)}, None)
    # SmolLM2's own convention: pad = eos = <|im_end|>, which every context contains
    check_model_conventions({"students.path": smollm2_path}, None)


def test_a_teacher_whose_template_renders_the_probe_differently_is_refused(smollm2_path, tmp_path):
    teacher = copy(smollm2_path, tmp_path / "teacher")
    template = (teacher / "chat_template.jinja").read_text()
    (teacher / "chat_template.jinja").write_text(template.replace("message['role'] + '\n'", "message['role'] + ':\n'"))
    message = refusal({"students.path": smollm2_path, "teacher.model_path": str(teacher)})
    assert message == (
        f"students.path: the chat template at {smollm2_path} renders a probe conversation differently from the "
        f"teacher's ({teacher}): from token 2, [198 'Ċ', 2683 'You', 359 'Ġare'] against [42 ':', 198 'Ċ', 2683 'You']"
    )


def test_a_teacher_with_another_eos_set_is_refused(smollm2_path, tmp_path):
    teacher = copy(smollm2_path, tmp_path / "teacher")
    edit_json(teacher / "generation_config.json", eos_token_id=[2, 0])
    message = refusal({"students.policy_paths.reasoner": smollm2_path, "teacher.model_path": str(teacher)})
    assert message == (
        f"students.policy_paths.reasoner: eos ids [2 '<|im_end|>'] at {smollm2_path}, but "
        f"[0 '<|endoftext|>', 2 '<|im_end|>'] at the teacher's {teacher}"
    )


def test_a_teacher_with_another_tokenizer_is_refused(smollm2_path):
    message = refusal({"students.path": smollm2_path, "teacher.model_path": str(TINY / "teacher")})
    assert message.startswith(f"students.path: the tokenizer at {smollm2_path} differs from the teacher's")


def test_eval_refuses_a_teacher_whose_template_renders_the_probe_differently(smollm2_path, tmp_path, capsys):
    teacher = copy(smollm2_path, tmp_path / "teacher")
    template = (teacher / "chat_template.jinja").read_text()
    (teacher / "chat_template.jinja").write_text(template.replace("message['role'] + '\n'", "message['role'] + ':\n'"))
    data = tmp_path / "math.parquet"
    command = [sys.executable, "-m", "data_prep", "builtin", "--domain", "math", "--output", str(data), "--n", "1"]
    subprocess.run(command, check=True, capture_output=True)
    arguments = ["--data", str(data), "--model", smollm2_path, "--teacher", str(teacher), "--out", str(tmp_path / "o")]
    assert eval_main(arguments) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"error: the reasoner policy's model: the chat template at {smollm2_path} renders a probe")
