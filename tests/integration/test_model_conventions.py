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
from transformers import AutoTokenizer

from verl_masopd.config.model_conventions import check_model_conventions
from verl_masopd.eval.__main__ import main as eval_main
from verl_masopd.options.errors import ConfigError

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


def test_an_end_of_turn_that_is_not_an_eos_is_refused(smollm2_path, tmp_path):
    """eos <|endoftext|> in the tokenizer and the generation config, a template that ends each assistant
    turn with <|im_end|> (a base model's convention): the HF backend stopped only at <|endoftext|>."""
    base = copy(TINY / "student", tmp_path / "base")
    edit_json(base / "tokenizer_config.json", eos_token="<|endoftext|>")
    edit_json(base / "generation_config.json", eos_token_id=0)
    assert refusal({"students.path": str(base)}, None) == (
        f"students.path: the chat template at {base} ends an assistant turn with [2 '<|im_end|>'], which is not "
        "an eos id ([0 '<|endoftext|>']), so replies run on past their end; set eos_token to '<|im_end|>' in "
        "tokenizer_config.json and eos_token_id to 2 in generation_config.json"
    )
    (base / "generation_config.json").unlink()  # the tokenizer's eos alone must end the turn
    assert refusal({"students.path": str(base)}, None) == (
        f"students.path: the chat template at {base} ends an assistant turn with [2 '<|im_end|>'], which is not "
        "an eos id ([0 '<|endoftext|>']), so replies run on past their end; set eos_token to '<|im_end|>' in "
        "tokenizer_config.json"
    )
    edit_json(base / "tokenizer_config.json", eos_token="<|im_end|>")  # the fix
    check_model_conventions({"students.path": str(base)}, None)
    smol = copy(smollm2_path, tmp_path / "smol")
    edit_json(smol / "tokenizer_config.json", eos_token="<|endoftext|>")
    edit_json(smol / "generation_config.json", eos_token_id=0)
    assert "ends an assistant turn with [2 '<|im_end|>'], which is not an eos id" in refusal({"s": str(smol)}, None)


def test_an_end_of_turn_in_the_generation_configs_eos_passes(tmp_path):
    """Qwen2.5-Instruct's convention: eos <|im_end|>, pad <|endoftext|>, both eos in the generation config."""
    qwen = copy(TINY / "student", tmp_path / "qwen")
    edit_json(qwen / "tokenizer_config.json", eos_token="<|im_end|>", pad_token="<|endoftext|>")
    edit_json(qwen / "generation_config.json", eos_token_id=[2, 0])
    check_model_conventions({"students.path": str(qwen)}, None)


LLAMA3 = (
    "{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' "
    "+ message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)
GEMMA = (
    "{% for message in messages %}{% set role = 'model' if message['role'] == 'assistant' else 'user' %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)


@pytest.mark.parametrize(
    "template,tokens",
    [
        (LLAMA3, ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]),
        (GEMMA, ["<start_of_turn>", "<end_of_turn>"]),
    ],
)
def test_the_end_of_turn_of_llama3_and_gemma_templates(tmp_path, template, tokens):
    """The tiny tokenizer with Llama 3's or Gemma's turn tokens and template: their end of turn
    (<|eot_id|>, <end_of_turn>) passes as eos and is named when the eos is <|endoftext|>."""
    tokenizer = AutoTokenizer.from_pretrained(TINY / "student")
    tokenizer.add_special_tokens({"additional_special_tokens": tokens})
    tokenizer.chat_template = template
    for eos in (tokens[-1], "<|endoftext|>"):
        tokenizer.eos_token = eos
        folder = tmp_path / eos.strip("<|>")
        tokenizer.save_pretrained(folder)
        if eos == tokens[-1]:
            check_model_conventions({"students.path": str(folder)}, None)
            continue
        end = tokenizer.convert_tokens_to_ids(tokens[-1])
        assert refusal({"students.path": str(folder)}, None) == (
            f"students.path: the chat template at {folder} ends an assistant turn with [{end} {tokens[-1]!r}], "
            f"which is not an eos id ([0 '<|endoftext|>']), so replies run on past their end; set eos_token to "
            f"{tokens[-1]!r} in tokenizer_config.json"
        )


def test_a_turn_ended_by_plain_text_is_refused(tmp_path):
    plain = copy(TINY / "student", tmp_path / "plain")
    template = (plain / "chat_template.jinja").read_text()
    (plain / "chat_template.jinja").write_text(template.replace("'<|im_end|>\\n'", "'\\n### end\\n'"))
    assert refusal({"students.path": str(plain)}, None) == (
        f"students.path: the chat template at {plain} ends an assistant turn with the text '### end\\n<|im_start|>', "
        "not a token, so generation has nothing to stop at but eos [2 '<|im_end|>']; use a template that ends "
        "each assistant turn with the eos token"
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
