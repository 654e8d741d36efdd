"""What each estimator needs and serves, its typed settings, and the start-up check of a config.

An estimator's spec declares everything the rest of the system needs to know about it, so
that the estimation (estimate.py) and the trainer hold no estimator names:
    serves        workflows, domains, policy sharings, agents per role
    needs         a teacher, a critic, a reference policy, tree sampling; the reward (team +
                  local, team only, none); the verl actor loss settings
    batch fields  `fields` handed to the estimator by name, `optional_fields` when present
    steps         `from_rollout(groups, workflow)`: meta_info entries built from the step's
                  rollout groups (before the batch-side steps); `prepare(data, settings)`: derived
                  inputs; `finish(advantages, returns, inputs)`: post-processing (a `Finished`)
    options       its `algorithm.<section>` dataclass, and which option overrides the actor's
                  gradient clip or gives the teacher's number of contrasting roles κ
`read_estimator(algorithm)` validates every option section once into `EstimatorSettings`, the
typed object handed down to the estimation and the trainer.

Config keys read here (the trainer's config extends verl's ppo_trainer config):
    algorithm.adv_estimator                         the estimator name (ESTIMATORS)
    algorithm.<section>.*                           the estimator's options (unknown keys rejected)
    algorithm.reward.*                              reward weights (rewards.py)
    algorithm.use_kl_in_reward                      verl's reward KL: must be false for every estimator
    workflow.name, workflow.domain ("code" | "math"), workflow.policy_sharing; a spec's `workflows`
                                                    names kinds: "mas" (two or more roles), "sa" (one)
    rollout.tree_sampling                           true only with at_grpo
    teacher.model_path                              required by masopd and opd
    actor_rollout_ref.actor.{policy_loss.loss_mode, loss_agg_mode, use_kl_loss, kl_loss_type}
                                                    must match `actor_settings(name)` where present
Keys that are absent are not checked; present ones with a wrong value raise a ValueError that
names the key.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl_masopd.algos.cure import finish_cure, prepare_cure
from verl_masopd.algos.cure_matrix import cure_matrices
from verl_masopd.algos.grpo import GrpoOptions, finish_grpo, prepare_grpo
from verl_masopd.algos.magrpo import MagrpoOptions
from verl_masopd.algos.marft import MarftOptions
from verl_masopd.algos.masopd import MasopdOptions
from verl_masopd.algos.options import read_options
from verl_masopd.algos.rewards import RewardWeights
from verl_masopd.workflows import workflow_class, workflow_kind

ALL_SHARING = frozenset({"role", "agent", "shared"})


@dataclass(frozen=True)
class EstimatorSpec:
    """What an estimator serves and needs; the defaults are those of most estimators.

    `joint_batch`: advantages need every policy's rows together (the chain crosses policies).
    `uses_local_reward`: the reward is team + local (False: team only; None: no batch reward).
    `max_agents_per_role`: the most agents of one role the estimator serves (None: any).
    `grad_clip_option`, `contrast_roles_option`: the option field that replaces the actor's
    grad_clip, and the one that gives κ (None: the actor's grad_clip; κ = 0)."""

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
    max_agents_per_role: int | None = None
    fields: tuple[str, ...] = ()
    optional_fields: tuple[str, ...] = ()
    from_rollout: Callable[[Any, Any], dict] | None = None
    prepare: Callable[[Any, "EstimatorSettings"], dict] | None = None
    finish: Callable[[Any, Any, dict], Any] | None = None
    grad_clip_option: str | None = None
    contrast_roles_option: str | None = None


# Independent policies (no single model playing every seat).
INDEPENDENT_POLICIES = frozenset({"role", "agent"})
# ℓS for the teacher estimators: the engine's old log-probs, else the sampling ones.
STUDENT_LOG_PROBS = ("old_log_probs", "rollout_log_probs")

ESTIMATORS: dict[str, EstimatorSpec] = {
    spec.name: spec
    for spec in (
        EstimatorSpec(
            "masopd",
            needs_teacher=True,
            uses_local_reward=None,
            options=("masopd", MasopdOptions),
            required_keys=("teacher.model_path",),
            fields=("teacher_log_probs", "teacher_contrast_log_probs"),
            optional_fields=STUDENT_LOG_PROBS,
            contrast_roles_option="num_contrast_roles",
        ),
        EstimatorSpec(
            "opd",
            workflows=frozenset({"mas", "sa"}),
            needs_teacher=True,
            uses_local_reward=None,
            required_keys=("teacher.model_path",),
            fields=("teacher_log_probs",),
            optional_fields=STUDENT_LOG_PROBS,
        ),
        EstimatorSpec(
            "grpo",
            workflows=frozenset({"mas", "sa"}),
            options=("grpo", GrpoOptions),
            prepare=prepare_grpo,
            finish=finish_grpo,
        ),
        EstimatorSpec(
            "magrpo",
            policy_sharing=INDEPENDENT_POLICIES,
            uses_local_reward=False,
            policy_loss="gpg",
            loss_agg_mode="seq-mean-token-sum",
            options=("magrpo", MagrpoOptions),
            fields=("uid", "episode_id", "turn", "num_turns"),
        ),
        EstimatorSpec(
            "marft",
            policy_sharing=INDEPENDENT_POLICIES,
            needs_critic=True,
            joint_batch=True,
            policy_loss="marft",
            loss_agg_mode="seq-mean-token-mean",
            options=("marft", MarftOptions),
            fields=("critic_values", "episode_id", "turn", "role", "agent_index"),
            grad_clip_option="max_grad_norm",
        ),
        EstimatorSpec(
            "cure",
            domains=frozenset({"code"}),
            policy_sharing=frozenset({"shared"}),
            needs_reference=True,
            uses_local_reward=None,
            max_agents_per_role=1,
            from_rollout=lambda groups, workflow: {"cure_matrices": cure_matrices(groups, workflow)},
            prepare=prepare_cure,
            finish=finish_cure,
        ),
        EstimatorSpec("at_grpo", tree_sampling=True, fields=("uid", "agent", "turn")),
    )
}


# Every option section under `algorithm`: verl's AlgoConfig does not know them.
OPTION_SECTIONS: dict[str, type] = {"reward": RewardWeights} | {
    spec.options[0]: spec.options[1] for spec in ESTIMATORS.values() if spec.options is not None
}


@dataclass(frozen=True)
class EstimatorSettings:
    """The estimator of a run with its validated options, read once from `algorithm`."""

    spec: EstimatorSpec
    options: Any
    reward: RewardWeights
    norm_adv_by_std_in_grpo: bool = True

    @property
    def name(self) -> str:
        return self.spec.name

    def actor_grad_clip(self, actor_grad_clip: float) -> float:
        """The actor's gradient clip, or the estimator's option that replaces it."""
        option = self.spec.grad_clip_option
        return actor_grad_clip if option is None else getattr(self.options, option)

    @property
    def num_contrast_roles(self) -> int:
        """κ, the contrasting role conditions the teacher scores (0: none)."""
        option = self.spec.contrast_roles_option
        return 0 if option is None else getattr(self.options, option)


def read_estimator(algorithm: Mapping) -> EstimatorSettings:
    """The settings of `algorithm.adv_estimator`; every option section is validated (unknown keys,
    bad values raise a ConfigError naming the key), whichever estimator runs."""
    name = algorithm.get("adv_estimator")
    if name is None:
        raise ValueError("algorithm.adv_estimator is missing")
    spec = estimator_spec(name)
    sections = {section: read_options(algorithm, section, cls) for section, cls in OPTION_SECTIONS.items()}
    return EstimatorSettings(
        spec=spec,
        options=sections[spec.options[0]] if spec.options is not None else None,
        reward=sections["reward"],
        norm_adv_by_std_in_grpo=bool(algorithm.get("norm_adv_by_std_in_grpo", True)),
    )


def register_estimator(spec: EstimatorSpec) -> EstimatorSpec:
    """Add a new estimator's spec (its function goes into verl's registry with `register_adv_est`
    under the same name); `algorithm.adv_estimator=<spec.name>` then selects it. Returns `spec`."""
    if spec.name in ESTIMATORS and ESTIMATORS[spec.name] != spec:
        raise ValueError(f"estimator {spec.name!r} is already registered with another spec")
    if spec.options is not None:
        section, options_class = spec.options
        if OPTION_SECTIONS.get(section, options_class) is not options_class:
            raise ValueError(f"algorithm.{section} already holds the options of another estimator")
        OPTION_SECTIONS[section] = options_class
    ESTIMATORS[spec.name] = spec
    return spec


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


def _check_workflow_kind(config: DictConfig, allowed: frozenset[str], name: str) -> None:
    workflow, domain = _select(config, "workflow.name"), _select(config, "workflow.domain")
    if workflow is None or domain is None:
        return
    kind = workflow_kind(workflow, domain)
    if kind not in allowed:
        raise ValueError(
            f"workflow.name={workflow!r} (kind {kind!r}) cannot be used with algorithm.adv_estimator={name}; "
            f"allowed kinds: {sorted(allowed)}"
        )


def validate_estimator_config(config: DictConfig) -> EstimatorSettings:
    """Check the estimator against the rest of the config; returns its settings, raises ValueError naming the key."""
    name = _select(config, "algorithm.adv_estimator")
    if name is None:
        raise ValueError("algorithm.adv_estimator is missing")
    spec = estimator_spec(name)

    _check_workflow_kind(config, spec.workflows, name)
    _check_choice(config, "workflow.domain", spec.domains, name)
    _check_choice(config, "workflow.policy_sharing", spec.policy_sharing, name)
    agents_per_role = _select(config, "workflow.agents_per_role")
    if spec.max_agents_per_role is not None and agents_per_role is not None:
        if agents_per_role > spec.max_agents_per_role:
            raise ValueError(
                f"workflow.agents_per_role={agents_per_role} cannot be used with algorithm.adv_estimator={name}, "
                f"which serves at most {spec.max_agents_per_role} agent(s) per role"
            )
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

    settings = read_estimator(config.algorithm)
    _check_contrast_roles(config, settings)
    return settings


def _check_contrast_roles(config: DictConfig, settings: EstimatorSettings) -> None:
    """κ contrasting roles must exist: C_r holds role types other than r."""
    workflow, domain = _select(config, "workflow.name"), _select(config, "workflow.domain")
    if workflow is None or domain is None:
        return
    others, kappa = len(workflow_class(workflow, domain).roles) - 1, settings.num_contrast_roles
    if kappa > others:
        raise ValueError(
            f"algorithm.{settings.spec.options[0]}.{settings.spec.contrast_roles_option}={kappa} exceeds the "
            f"{others} other role type(s) of workflow.name={workflow}"
        )
