"""Which generation path a run takes, chosen from the config and checked at start-up.

hf    the project's Hugging Face backend in the driver, one per policy, fed new weights from
      the policy's `TrainingWorker` engine after every update. Taken when
      `actor_rollout_ref.rollout.name=hf`, and on CPU (`trainer.device=cpu`, the CPU preset),
      where the config's default `vllm` stands for "the GPU generation engine" and the CPU
      runs use the HF backend instead.
vllm  verl's vLLM servers, colocated with each policy's hybrid `ActorRolloutRefWorker`
      (trainer/hybrid_policy.py). Taken when `actor_rollout_ref.rollout.name=vllm` and
      `trainer.device` is a GPU device; needs GPUs that torch sees, an importable vllm, and
      `engines.placement=ray`.
"""

from __future__ import annotations

import importlib.util

from omegaconf import DictConfig

from verl_masopd.trainer.config import ConfigError

HF, VLLM = "hf", "vllm"
NAME_KEY = "actor_rollout_ref.rollout.name"


def select_generation_path(cfg: DictConfig, *, gpus: int | None = None, vllm_importable: bool | None = None) -> str:
    """HF or VLLM for `cfg`; a ConfigError naming the key when the choice cannot run here.

    gpus / vllm_importable: what this machine has (default: torch.cuda.device_count() and
    whether `vllm` can be imported).
    """
    name = cfg.actor_rollout_ref.rollout.name
    if name not in (HF, VLLM):
        raise ConfigError(f"{NAME_KEY}: must be {HF!r} or {VLLM!r}, got {name!r}")
    if name == HF or cfg.trainer.device == "cpu":
        return HF
    if gpus is None:
        import torch

        gpus = torch.cuda.device_count()
    if vllm_importable is None:
        vllm_importable = importlib.util.find_spec("vllm") is not None
    if gpus < 1:
        raise ConfigError(
            f"{NAME_KEY}={VLLM} with trainer.device={cfg.trainer.device} needs GPUs, but torch sees "
            f"none; use {NAME_KEY}={HF} or trainer.device=cpu (preset=cpu) on this machine"
        )
    if not vllm_importable:
        raise ConfigError(f"{NAME_KEY}={VLLM}: the vllm package cannot be imported; install it or use {NAME_KEY}={HF}")
    if cfg.engines.placement != "ray":
        raise ConfigError(
            f"engines.placement={cfg.engines.placement}: {NAME_KEY}={VLLM} runs each policy's vLLM "
            "servers on its Ray worker group and needs engines.placement=ray"
        )
    return VLLM
