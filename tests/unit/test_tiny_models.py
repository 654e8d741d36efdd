"""Tiny offline models: deterministic builds, the chat template, loading with transformers."""

import hashlib
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl_masopd.tiny_world.models import build_model, build_tokenizer, cached_model, main
from verl_masopd.tokens.chat import encode_messages


def _file_hashes(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(folder).iterdir())}


def test_same_seed_builds_identical_files(tmp_path):
    build_model(tmp_path / "a", size="tiny", seed=3)
    main(["--out", str(tmp_path / "b"), "--size", "tiny", "--seed", "3"])
    hashes = _file_hashes(tmp_path / "a")
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= set(hashes)
    assert hashes == _file_hashes(tmp_path / "b")


def test_different_seed_changes_weights_not_tokenizer(tmp_path):
    build_model(tmp_path / "a", size="tiny", seed=0)
    build_model(tmp_path / "b", size="tiny", seed=1)
    a, b = _file_hashes(tmp_path / "a"), _file_hashes(tmp_path / "b")
    assert a["model.safetensors"] != b["model.safetensors"]
    assert a["tokenizer.json"] == b["tokenizer.json"]


def test_sizes_and_shared_vocabulary(tiny_model_path, tiny_teacher_path):
    student = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    teacher = AutoModelForCausalLM.from_pretrained(tiny_teacher_path)
    assert type(student).__name__ == "Qwen3ForCausalLM"
    assert student.dtype == torch.float32
    assert 0.5e6 < student.num_parameters() < 2e6
    assert 5e6 < teacher.num_parameters() < 15e6
    assert student.config.vocab_size == teacher.config.vocab_size == len(AutoTokenizer.from_pretrained(tiny_model_path))
    assert (Path(tiny_model_path) / "tokenizer.json").read_bytes() == (
        Path(tiny_teacher_path) / "tokenizer.json"
    ).read_bytes()


def test_tokenizer_special_tokens_and_padding(tiny_tokenizer):
    assert tiny_tokenizer.pad_token == "<|endoftext|>"
    assert tiny_tokenizer.eos_token == "<|im_end|>"
    assert tiny_tokenizer.padding_side == "left"
    batch = tiny_tokenizer(["a", "a longer text"], padding=True)
    assert batch["input_ids"][0][0] == tiny_tokenizer.pad_token_id
    assert batch["attention_mask"][0][0] == 0 and batch["attention_mask"][1][0] == 1


def test_byte_level_round_trip(tiny_tokenizer):
    text = "def f(x):\n    return x ** 2  # ünïcode ✓ 数学\n"
    ids = tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tiny_tokenizer.decode(ids) == text


def test_chat_template_renders_qwen3_no_thinking(tiny_tokenizer):
    messages = [
        {"role": "system", "content": "You are the coder."},
        {"role": "user", "content": "Add 1 and 2."},
        {"role": "assistant", "content": "3"},
        {"role": "user", "content": "Again."},
    ]
    ids = encode_messages(tiny_tokenizer, messages)
    assert tiny_tokenizer.decode(ids) == (
        "<|im_start|>system\nYou are the coder.<|im_end|>\n"
        "<|im_start|>user\nAdd 1 and 2.<|im_end|>\n"
        "<|im_start|>assistant\n3<|im_end|>\n"
        "<|im_start|>user\nAgain.<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    special = tiny_tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>", "<think>", "</think>"])
    assert ids.count(special[0]) == 5 and ids.count(special[1]) == 4
    assert ids.count(special[2]) == 1 and ids.count(special[3]) == 1


def test_chat_template_rejects_unknown_role(tiny_tokenizer):
    with pytest.raises(Exception, match="unsupported chat role: tool"):
        encode_messages(tiny_tokenizer, [{"role": "tool", "content": "x"}])


def test_cached_model_is_built_once(tmp_path):
    first = cached_model(tmp_path, size="tiny", seed=5)
    stamp = (Path(first) / "model.safetensors").stat().st_mtime_ns
    assert cached_model(tmp_path, size="tiny", seed=5) == first
    assert (Path(first) / "model.safetensors").stat().st_mtime_ns == stamp
    assert [p.name for p in Path(first).parent.iterdir()] == ["tiny-seed5"]


def test_unknown_size_is_named(tmp_path):
    with pytest.raises(ValueError, match="'huge'"):
        build_model(tmp_path, size="huge")


def test_build_tokenizer_is_deterministic():
    assert build_tokenizer().backend_tokenizer.to_str() == build_tokenizer().backend_tokenizer.to_str()
