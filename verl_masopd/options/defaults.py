"""The one source of the project's defaults: `config/masopd_trainer.yaml`.

A setting's default is the value that file gives its key, before any preset or override (verl's
own keys keep verl's defaults). Code that needs a default without a composed config reads it
here instead of writing the value again: the typed estimator options take their field defaults
from their `algorithm.<section>` (`packaged_defaults`), so `MasopdOptions()` in Python is the
trainer's `algorithm.masopd`; the evaluation CLI's defaults and the distillation section's
fallbacks read their keys (`packaged_default`). tests/unit/test_defaults_agree.py checks every
typed section against the composed config and the values docs/method.md names.
"""

from __future__ import annotations

from dataclasses import MISSING
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from omegaconf import OmegaConf

CONFIG_FILE = Path(__file__).resolve().parents[1] / "config" / "masopd_trainer.yaml"
T = TypeVar("T")


@cache
def _packaged():
    return OmegaConf.load(CONFIG_FILE)


def packaged_default(key: str) -> Any:
    """The value `masopd_trainer.yaml` gives the dotted `key` (containers as plain dicts and lists);
    KeyError when the file does not set it."""
    value = OmegaConf.select(_packaged(), key, default=MISSING)
    if value is MISSING:
        raise KeyError(f"{key} is not set in {CONFIG_FILE.name}")
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def packaged_defaults(section: str):
    """Class decorator, applied under `@dataclass`: every annotated field of the class defaults to
    `section.<field>` of the packaged config (KeyError naming the key when it is not set there)."""

    def apply(cls: type[T]) -> type[T]:
        for name in cls.__annotations__:
            setattr(cls, name, packaged_default(f"{section}.{name}"))
        return cls

    return apply
