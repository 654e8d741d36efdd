"""What each estimator needs and serves, and the start-up check of a config against it.

Config keys read here (the trainer's config extends verl's ppo_trainer config):
    algorithm.adv_estimator                         the estimator name (ESTIMATORS)
    algorithm.<section>.*                           the estimator's options (unknown keys rejected)
    algorithm.reward.*                              reward weights (rewards.py)
    algorithm.use_kl_in_reward                      verl's reward KL: must be false for every estimator
    workflow.name ("mas" | "sa"), workflow.domain ("code" | "math"), workflow.policy_sharing
    rollout.tree_sampling                           true only with at_grpo
    teacher.model_path                              required by masopd and opd
    actor_rollout_ref.actor.{policy_loss.loss_mode, loss_agg_mode, use_kl_loss, kl_loss_type}
                                                    must match `actor_settings(name)` where present
Keys that are absent are not checked; present ones with a wrong value raise a ValueError that
names the key.
"""

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl_masopd.algos.grpo import GrpoOptions
from verl_masopd.algos.magrpo import MagrpoOptions
from verl_masopd.algos.marft import MarftOptions
from verl_masopd.algos.masopd import MasopdOptions
from verl_masopd.algos.options import read_options
from verl_masopd.algos.rewards import RewardWeights

ROLE_TYPES = {"mas": 2, "sa": 1}
ALL_SHARING = frozenset({"role", "agent", "shared"})


@dataclass(frozen=True)
class EstimatorSpec:
    """What an estimator serves and needs; the defaults are those of most estimators.

    `joint_batch`: advantages need every policy's rows together (the chain crosses policies).
    `uses_local_reward`: the reward is team + local (False: team only; None: no batch reward)."""

    name: str
    workflows: frozenset[str] = frozenset({"mas"})
    domains: frozenset[str] = frozenset({"code", "math"})
    policy_sharing: frozenset[str] = ALL_SHARING
    needs_teacher: bool = False
    needs_critic: bool = False
    needs_reference: bool = False
    tree_sampling: bool = False
    joint_batch: bool = False
    uses_local_reward: bool | None = True
    policy_loss: str = "vanilla"
    loss_agg_mode: str = "token-mean"
    options: tuple[str, type] | None = None
    required_keys: tuple[str, ...] = ()


# Independent policies (no single model playing every seat).
INDEPENDENT_POLICIES = frozenset({"role", "agent"})

ESTIMATORS: dict[str, EstimatorSpec] = {
    spec.name: spec
    for spec in (
        EstimatorSpec(
            "masopd",
            needs_teacher=True,
            uses_local_reward=None,
            options=("masopd", MasopdOptions),
            required_keys=("teacher.model_path",),
        ),
        EstimatorSpec(
            "opd",
            workflows=frozenset({"mas", "sa"}),
            needs_teacher=True,
            uses_local_reward=None,
            required_keys=("teacher.model_path",),
        ),
        EstimatorSpec("grpo", workflows=frozenset({"mas", "sa"}), options=("grpo", GrpoOptions)),
        EstimatorSpec(
            "magrpo",
            policy_sharing=INDEPENDENT_POLICIES,
            uses_local_reward=False,
            policy_loss="gpg",
            loss_agg_mode="seq-mean-token-sum",
            options=("magrpo", MagrpoOptions),
        ),
        EstimatorSpec(
            "marft",
            policy_sharing=INDEPENDENT_POLICIES,
            needs_critic=True,
            joint_batch=True,
            policy_loss="marft",
            loss_agg_mode="seq-mean-token-mean",
            options=("marft", MarftOptions),
        ),
        EstimatorSpec(
            "cure",
            domains=frozenset({"code"}),
            policy_sharing=frozenset({"shared"}),
            needs_reference=True,
            uses_local_reward=None,
        ),
        EstimatorSpec("at_grpo", tree_sampling=True),
    )
}


def estimator_spec(name: str) -> EstimatorSpec:
    if name not in ESTIMATORS:
        raise ValueError(f"algorithm.adv_estimator={name!r} is not one of {sorted(ESTIMATORS)}")
    return ESTIMATORS[name]


def actor_settings(name: str) -> dict[str, Any]:
    """The verl actor keys (under actor_rollout_ref.actor) the estimator's loss runs with."""
    spec = estimator_spec(name)
    settings = {
        "policy_loss.loss_mode": spec.policy_loss,
        "loss_agg_mode": spec.loss_agg_mode,
        "use_kl_loss": spec.needs_reference,
    }
    if spec.needs_reference:
        settings["kl_loss_type"] = "low_var_kl"
    return settings


def _select(config: DictConfig, key: str) -> Any:
    return OmegaConf.select(config, key, default=None)


def _check_choice(config: DictConfig, key: str, allowed: frozenset[str], name: str) -> None:
    value = _select(config, key)
    if value is not None and value not in allowed:
        raise ValueError(
            f"{key}={value!r} cannot be used with algorithm.adv_estimator={name}; allowed: {sorted(allowed)}"
        )


def validate_estimator_config(config: DictConfig) -> EstimatorSpec:
    """Check the estimator against the rest of the config; returns its spec, raises ValueError naming the key."""
    name = _select(config, "algorithm.adv_estimator")
    if name is None:
        raise ValueError("algorithm.adv_estimator is missing")
    spec = estimator_spec(name)
    algorithm = config.algorithm

    _check_choice(config, "workflow.name", spec.workflows, name)
    _check_choice(config, "workflow.domain", spec.domains, name)
    _check_choice(config, "workflow.policy_sharing", spec.policy_sharing, name)
    for key in spec.required_keys:
        if _select(config, key) in (None, ""):
            raise ValueError(f"{key} is required by algorithm.adv_estimator={name}")

    tree_sampling = bool(_select(config, "rollout.tree_sampling"))
    if tree_sampling != spec.tree_sampling:
        raise ValueError(
            f"rollout.tree_sampling must be {str(spec.tree_sampling).lower()} with algorithm.adv_estimator={name}"
        )
    if _select(config, "algorithm.use_kl_in_reward"):
        raise ValueError(f"algorithm.use_kl_in_reward must be false with algorithm.adv_estimator={name}")

    for key, expected in actor_settings(name).items():
        value = _select(config, f"actor_rollout_ref.actor.{key}")
        if value is not None and value != expected:
            raise ValueError(
                f"actor_rollout_ref.actor.{key}={value!r} contradicts algorithm.adv_estimator={name}, "
                f"which needs {expected!r}"
            )

    read_options(algorithm, "reward", RewardWeights)
    if spec.options is not None:
        section, options_class = spec.options
        options = read_options(algorithm, section, options_class)
        if spec.name == "masopd":
            _check_contrast_roles(config, options)
    return spec


def _check_contrast_roles(config: DictConfig, options: MasopdOptions) -> None:
    """κ contrasting roles must exist: C_r holds role types other than r."""
    workflow = _select(config, "workflow.name")
    if workflow in ROLE_TYPES and options.num_contrast_roles > ROLE_TYPES[workflow] - 1:
        raise ValueError(
            f"algorithm.masopd.num_contrast_roles={options.num_contrast_roles} exceeds the "
            f"{ROLE_TYPES[workflow] - 1} other role type(s) of workflow.name={workflow}"
        )
