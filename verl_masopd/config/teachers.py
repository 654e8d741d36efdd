"""The teachers of a run's `distillation` section, read at start into `Teachers` (teacher/teachers.py,
whose module docstring describes the keys, the routing and the combination of several teachers).

Refused at start, by key: a weight that is not a finite number > 0, a routing key or weighting
verl and the project do not have, a temperature <= 0, and a `teacher.model_path` that is not one
of several teachers' model paths.
"""

from __future__ import annotations

import math

from omegaconf import DictConfig, OmegaConf

from verl_masopd.options.defaults import packaged_default
from verl_masopd.options.errors import require
from verl_masopd.teacher.teachers import ROUTING, SECTION, WEIGHTINGS, Teacher, Teachers


def read_teachers(config: DictConfig, primary: str | None) -> Teachers:
    """The teachers of `distillation` (teacher/teachers.py); `primary` is teacher.model_path. A bad entry or
    setting is a ConfigError naming its key."""
    section = OmegaConf.select(config, "distillation", default=None) or {}
    entries = []
    for name, entry in (section.get("teacher_models") or {}).items():
        if entry is None or entry.get("model_path") in (None, ""):
            continue
        weight = entry.get("weight", 1.0)
        require(
            isinstance(weight, int | float) and not isinstance(weight, bool) and weight > 0 and math.isfinite(weight),
            f"{SECTION}.{name}.weight",
            f"must be a finite number > 0, got {weight!r}",
        )
        key = entry.get("key")
        entries.append(Teacher(str(name), str(entry.model_path), None if key is None else str(key), float(weight)))
    route_by = section.get("teacher_key", "data_source")
    require(route_by in ROUTING, "distillation.teacher_key", f"must be one of {list(ROUTING)}, got {route_by!r}")
    weighting = section.get("teacher_weighting", packaged_default("distillation.teacher_weighting"))
    require(
        weighting in WEIGHTINGS,
        "distillation.teacher_weighting",
        f"must be one of {list(WEIGHTINGS)}, got {weighting!r}",
    )
    temperature = section.get("teacher_temperature", packaged_default("distillation.teacher_temperature"))
    require(
        isinstance(temperature, int | float) and temperature > 0,
        "distillation.teacher_temperature",
        f"must be > 0, got {temperature!r}",
    )
    if not entries:
        return Teachers((Teacher("teacher", primary),) if primary else (), route_by, weighting, float(temperature))
    require(
        primary in (None, "") or primary in {t.model_path for t in entries},
        "teacher.model_path",
        f"{primary} is not one of {SECTION}'s model paths {[t.model_path for t in entries]}; "
        "set it to one of them or to null (the first)",
    )
    return Teachers(tuple(entries), route_by, weighting, float(temperature))
