"""Typed, validated estimator options read from the `algorithm.<section>` block of the config.

Each estimator declares its options as a frozen dataclass whose defaults are the paper's
settings. `read_options` accepts the algorithm section as an OmegaConf `DictConfig`, a plain
mapping, verl's `AlgoConfig` or None (all defaults). Unknown keys and bad values raise a
`ValueError` that names the full key, e.g. `algorithm.masopd.ras_clip`.
"""

from collections.abc import Mapping
from dataclasses import fields
from typing import TypeVar

from omegaconf import DictConfig, OmegaConf

T = TypeVar("T")


def read_options(algorithm_config: Mapping | None, section: str, cls: type[T]) -> T:
    """`algorithm.<section>` as an instance of `cls`; absent keys keep the dataclass defaults."""
    raw = algorithm_config.get(section) if algorithm_config is not None else None
    if raw is None:
        return cls()
    if isinstance(raw, DictConfig):
        raw = OmegaConf.to_container(raw, resolve=True)
    if not isinstance(raw, Mapping):
        raise ValueError(f"algorithm.{section} must be a mapping of options, got {type(raw).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"unknown key algorithm.{section}.{unknown[0]}; known keys: {sorted(known)}")
    return cls(**raw)


def require(condition: bool, key: str, message: str) -> None:
    """Raise a ValueError naming `key` when `condition` is false (used in options' __post_init__)."""
    if not condition:
        raise ValueError(f"{key}: {message}")
