"""Per-role estimators, `algorithm.per_role`: the entries read from the config, and the group key
of a role's rows.

    algorithm.per_role.<role>.estimator   the estimator of that role's rows (ESTIMATORS)
    algorithm.per_role.<role>.group_by    the group key of that role's rows (default "problem")

A role not listed takes `algorithm.adv_estimator`, grouped by problem. Each role's estimator runs
on the role's rows alone (estimate.py), with its "uid" column replaced by the group key below;
the estimator then groups as it always does (GRPO by `algorithm.grpo.group_by` on that column,
MAGRPO per turn over the group's episodes):

    problem   uid                  the G episodes of the row's problem
    episode   uid | episode_id     the role's rows within one episode (e.g. its agents' candidates)
    turn      uid | episode_id | turn   the role's rows of one turn of one episode

With GRPO's default `problem_role_turn`, an episode's groups are still split per turn, so
"episode" spans turns only with `algorithm.grpo.group_by` problem or problem_role.
"""

from collections.abc import Mapping

import numpy as np
from omegaconf import DictConfig, OmegaConf

from verl_masopd.algos.grpo import group_index
from verl_masopd.options.errors import ConfigError, require

PER_ROLE = "per_role"
GROUP_BY: dict[str, tuple[str, ...]] = {
    "problem": (),
    "episode": ("episode_id",),
    "turn": ("episode_id", "turn"),
}
ENTRY_KEYS = ("estimator", "group_by")


def role_entries(algorithm: Mapping | None) -> dict[str, tuple[str, str]]:
    """{role: (estimator name, group_by)} of `algorithm.per_role` ({} when absent or empty); a value
    that is not a mapping, an unknown key, a missing estimator or an unknown group_by is a
    ConfigError naming the key. Estimator names are checked against the registry by the caller."""
    raw = algorithm.get(PER_ROLE) if algorithm is not None else None
    if not raw:
        return {}
    if isinstance(raw, DictConfig):
        raw = OmegaConf.to_container(raw, resolve=True)
    require(
        isinstance(raw, Mapping),
        f"algorithm.{PER_ROLE}",
        f"must map role names to {{estimator, group_by}}, got {type(raw).__name__}",
    )
    entries = {}
    for role, entry in raw.items():
        key = f"algorithm.{PER_ROLE}.{role}"
        require(isinstance(entry, Mapping), key, f"must be a mapping with keys {list(ENTRY_KEYS)}, got {entry!r}")
        unknown = sorted(set(entry) - set(ENTRY_KEYS))
        if unknown:
            raise ConfigError(f"unknown key {key}.{unknown[0]}; known keys: {list(ENTRY_KEYS)}")
        require(entry.get("estimator") is not None, f"{key}.estimator", "a value is required")
        group_by = entry.get("group_by", "problem")
        require(group_by in GROUP_BY, f"{key}.group_by", f"must be one of {sorted(GROUP_BY)}, got {group_by!r}")
        entries[str(role)] = (entry["estimator"], group_by)
    return entries


def group_key(non_tensor_batch: dict, group_by: str, role: str) -> np.ndarray:
    """The "uid" column of one role's rows under `group_by` (the table above)."""
    fields = GROUP_BY[group_by]
    if not fields:
        return non_tensor_batch["uid"]
    missing = [name for name in ("uid", *fields) if name not in non_tensor_batch]
    if missing:
        raise ValueError(
            f"algorithm.{PER_ROLE}.{role}.group_by={group_by} needs the batch field {missing[0]!r}, which is missing"
        )
    return group_index(non_tensor_batch, ("uid", *fields))
