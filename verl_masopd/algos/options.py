"""Typed, validated estimator options read from the `algorithm.<section>` block of the config.

Each estimator declares its options as a frozen dataclass; the project's own take their
defaults from their `algorithm.<section>` of config/masopd_trainer.yaml
(verl_masopd/options/defaults.py), so options built in Python are the trainer's. `read_options` accepts
the algorithm section as an OmegaConf `DictConfig`, a plain mapping, verl's `AlgoConfig` or None
(all defaults). Unknown keys and bad values raise a
`ConfigError` that names the full key, e.g. `algorithm.masopd.ras_clip`. The start-up check
reads every section once (specs.py) and hands the typed options down; an estimator called
through verl's registry with verl's algorithm config reads its section itself (`options_from`).
"""

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf

from verl_masopd.options.errors import ConfigError

T = TypeVar("T")


def read_options(algorithm_config: Mapping | None, section: str, cls: type[T]) -> T:
    """`algorithm.<section>` as an instance of `cls`; absent keys keep the dataclass defaults."""
    raw = algorithm_config.get(section) if algorithm_config is not None else None
    if raw is None:
        return cls()
    if isinstance(raw, DictConfig):
        raw = OmegaConf.to_container(raw, resolve=True)
    if not isinstance(raw, Mapping):
        raise ConfigError(f"algorithm.{section}: must be a mapping of options, got {type(raw).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"unknown key algorithm.{section}.{unknown[0]}; known keys: {sorted(known)}")
    return cls(**raw)


def options_from(config: Any, section: str, cls: type[T]) -> T:
    """`config` itself when it already is the typed options, else its `<section>` read by `read_options`."""
    return config if isinstance(config, cls) else read_options(config, section, cls)
