"""Each policy's LoRA adapter, from verl's model keys and a per-policy override, checked at start.

verl's keys under `actor_rollout_ref.model` apply to every policy:
    lora_rank           r (0: full fine-tuning, no adapter)
    lora_alpha          α; the adapted layer computes W x + (α / r) · B A x
    target_modules      "all-linear" or module names (peft's matching)
    exclude_modules     names left out of target_modules
    lora_adapter_path   a PEFT adapter to start from (B = 0 otherwise)
`students.lora.<policy>` holds the same keys for one policy (a policy of this run under
`workflow.policy_sharing`), overriding the shared ones, e.g. a higher rank for the Coder:
`+students.lora.coder.lora_rank=32`.

Refused at start, each by its key: a negative rank, or a rank ≤ 0 in a policy's own section (the
section turns LoRA on for it); target modules that match no module of the policy's model; an
adapter whose adapter_config.json names a base model other than the policy's starting folder; an
unknown key in a policy's section.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from peft import LoraConfig, get_peft_model
from transformers import AutoConfig, AutoModelForCausalLM

from verl_masopd.engine.policy_engine import Lora
from verl_masopd.options.errors import require

MODEL = "actor_rollout_ref.model"
KEYS = ("lora_rank", "lora_alpha", "target_modules", "exclude_modules", "lora_adapter_path")


def policy_loras(cfg: DictConfig, policy_paths: Mapping[str, str]) -> dict[str, Lora | None]:
    """Every policy's adapter (None: full fine-tuning); `policy_paths` maps each policy of the run
    to the folder it starts from."""
    shared = {key: OmegaConf.select(cfg, f"{MODEL}.{key}", default=None) for key in KEYS}
    section = OmegaConf.select(cfg, "students.lora", default=None)
    own = OmegaConf.to_container(section, resolve=True) if section is not None else {}
    unknown = sorted(set(own) - set(policy_paths))
    require(not unknown, "students.lora", f"{unknown} are not policies of this run ({list(policy_paths)})")
    loras = {}
    for policy, path in policy_paths.items():
        section = own.get(policy)
        keys = dict(shared)
        if section is not None:
            bad = sorted(set(section) - set(KEYS))
            require(not bad, f"students.lora.{policy}.{bad[0] if bad else ''}", f"unknown key; known: {list(KEYS)}")
            keys |= section
        loras[policy] = _lora(policy, path, keys, section is not None)
    return loras


def _key(policy: str, name: str, own: bool) -> str:
    return f"students.lora.{policy}.{name}" if own else f"{MODEL}.{name}"


def _lora(policy: str, path: str, keys: dict, own: bool) -> Lora | None:
    rank = keys["lora_rank"] or 0
    require(
        isinstance(rank, int) and rank >= (1 if own else 0),
        _key(policy, "lora_rank", own),
        f"must be an integer >= {1 if own else 0} (a policy's own section turns LoRA on), got {rank!r}",
    )
    if rank == 0:
        return None
    targets = keys["target_modules"] or "all-linear"
    targets = targets if isinstance(targets, str) else tuple(targets)
    excluded = tuple(keys["exclude_modules"]) if keys["exclude_modules"] else None
    lora = Lora(
        rank=rank,
        alpha=keys["lora_alpha"] if keys["lora_alpha"] is not None else 16,
        target_modules=targets,
        exclude_modules=excluded,
        adapter_path=os.path.expanduser(keys["lora_adapter_path"]) if keys["lora_adapter_path"] else None,
    )
    _check_targets(policy, path, lora, own)
    if lora.adapter_path is not None:
        _check_adapter(policy, path, lora.adapter_path, own)
    return lora


def _check_targets(policy: str, path: str, lora: Lora, own: bool) -> None:
    problem = _target_problem(path, lora.target_modules, lora.exclude_modules)
    key = _key(policy, "target_modules" if lora.exclude_modules is None else "exclude_modules", own)
    require(problem is None, key, problem or "")


@functools.cache
def _target_problem(path: str, targets: tuple[str, ...] | str, excluded: tuple[str, ...] | None) -> str | None:
    """Why peft's own matching finds no module to adapt in the model at `path` (None: it finds
    some), on the model built from its config on the meta device (no weights); once per model and
    setting, however many policies share them."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
    config = LoraConfig(
        r=1,
        target_modules=targets if isinstance(targets, str) else list(targets),
        exclude_modules=None if excluded is None else list(excluded),
    )
    try:
        get_peft_model(model, config)
    except ValueError as e:
        linear = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
        return f"{str(e).splitlines()[0]} (the model at {path} has linear layers {linear})"
    return None


def _check_adapter(policy: str, path: str, adapter: str, own: bool) -> None:
    key = _key(policy, "lora_adapter_path", own)
    config = Path(adapter) / "adapter_config.json"
    require(config.is_file(), key, f"no PEFT adapter at {adapter} (no adapter_config.json)")
    base = json.loads(config.read_text()).get("base_model_name_or_path")
    same = base is not None and os.path.realpath(os.path.expanduser(base)) == os.path.realpath(path)
    require(same, key, f"the adapter at {adapter} was trained on {base!r}, but policy {policy} starts from {path}")
