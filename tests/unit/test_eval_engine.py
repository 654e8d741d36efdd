"""Which backend `python -m verl_masopd.eval` generates with (eval/generation.py): vLLM for real
models where it is installed, the Hugging Face backend for tiny-world models and, with one line
saying so, where vLLM is missing; and the dtype each generates in."""

from __future__ import annotations

import json

import pytest

from verl_masopd.eval.generation import FALLBACK, choose_engine, generation_dtype, is_tiny_world_model
from verl_masopd.models.registry import cpu_has_bf16
from verl_masopd.tiny_world.weights import WEIGHTS

TINY = str(WEIGHTS / "math" / "student")


@pytest.fixture
def real_model(tmp_path):
    """A model folder with SmolLM2-135M's vocabulary size (49,152 tokens)."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 49152}))
    return str(tmp_path)


def test_a_real_model_generates_with_vllm_where_it_is_installed(real_model):
    assert choose_engine("auto", [real_model], vllm_available=True) == ("vllm", None)


def test_without_vllm_a_real_model_falls_back_to_hf_saying_so_in_one_line(real_model):
    engine, note = choose_engine("auto", [real_model], vllm_available=False)
    assert (engine, note) == ("hf", "vLLM is not installed; generating with the Hugging Face backend (slower)")
    assert note == FALLBACK and "\n" not in note


def test_tiny_world_models_keep_the_hf_backend_silently(real_model):
    assert is_tiny_world_model(TINY) and not is_tiny_world_model(real_model)
    assert choose_engine("auto", [TINY], vllm_available=True) == ("hf", None)
    assert choose_engine("auto", [real_model, TINY], vllm_available=True) == ("hf", None)


def test_an_explicit_engine_is_kept_and_vllm_without_vllm_is_refused(real_model):
    assert choose_engine("hf", [real_model], vllm_available=True) == ("hf", None)
    assert choose_engine("vllm", [TINY], vllm_available=True) == ("vllm", None)
    with pytest.raises(ValueError, match="--engine vllm: vLLM is not installed"):
        choose_engine("vllm", [real_model], vllm_available=False)


def test_dtype_is_bfloat16_on_vllm_only_where_the_machine_has_it():
    assert generation_dtype("auto", "vllm", bf16_available=True) == "bfloat16"
    assert generation_dtype("auto", "vllm", bf16_available=False) == "float32"
    assert generation_dtype("auto", "hf", bf16_available=True) == "float32"
    assert generation_dtype("float32", "vllm", bf16_available=True) == "float32"
    assert generation_dtype("bfloat16", "hf", bf16_available=False) == "bfloat16"


def test_bf16_instructions_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512f avx512_bf16\n")
    assert cpu_has_bf16(cpuinfo)
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2\n")
    assert not cpu_has_bf16(cpuinfo)
    assert not cpu_has_bf16(tmp_path / "missing")
