"""Advantage estimators and policy losses, registered into verl's registries on import.

Estimators (verl's `get_adv_estimator_fn(name)`): masopd, opd, magrpo, marft, cure, at_grpo,
judge_grpo, frozen; grpo is verl's own, used with a configurable grouping key. Policy loss (`get_policy_loss_fn`):
marft. Each estimator's needs are declared in its spec (specs.py), checked against the config at
start-up (config/estimator.py); the trainer calls `compute_advantages(data, settings, results, workflow)`
with the settings the start-up check returned; `algorithm.per_role` gives roles
estimators of their own (per_role.py).
"""

from verl_masopd.algos import at_grpo, cure, magrpo, marft, masopd  # noqa: F401  (registration)
from verl_masopd.algos.estimate import compute_advantages
from verl_masopd.algos.specs import (
    ESTIMATORS,
    EstimatorSettings,
    EstimatorSpec,
    RoleEstimator,
    actor_settings,
    estimator_spec,
    read_estimator,
    register_estimator,
)

__all__ = [
    "ESTIMATORS",
    "EstimatorSettings",
    "EstimatorSpec",
    "RoleEstimator",
    "actor_settings",
    "compute_advantages",
    "estimator_spec",
    "read_estimator",
    "register_estimator",
]
