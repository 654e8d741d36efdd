"""What each estimator needs and serves, and its typed settings.

An estimator's spec declares everything the rest of the system needs to know about it, so
that the estimation (estimate.py) and the trainer hold no estimator names:
    serves        workflows, domains, policy sharings, agents per role
    needs         a teacher, a judge (the teacher prompted as one, teacher/judging.py), a
                  critic, a reference policy, tree sampling; the reward (team + local, team
                  only, none); the verl actor loss settings
    batch fields  `fields` handed to the estimator by name, `optional_fields` when present;
                  with `episodes`, the records' structure over the rows (`episodes`, an
                  `EpisodeRows`, rollout/episode_rows.py): which rows are one episode
    steps         `from_rollout(groups, workflow)`: meta_info entries built from the step's
                  rollout groups (before the batch-side steps); `prepare(data, settings)`: derived
                  inputs; `finish(advantages, returns, inputs)`: post-processing (a `Finished`)
    diagnostics   `token_terms(data, settings)`: the per-token parts of A_k [B, R] by name, which
                  diagnostics.py logs per role and token class (never read by the loss)
    options       its `algorithm.<section>` dataclass, and which option overrides the actor's
                  gradient clip or gives the teacher's number of contrasting roles κ
    baseline      `group_baseline`: a mean over a group's rows, over its episodes, or none
`read_estimator(algorithm)` validates every option section once into `EstimatorSettings`, the
typed object handed down to the estimation and the trainer; with `algorithm.per_role`
(per_role.py) it also holds each listed role's estimator, and answers for all the estimators in
play what the trainer must build (`needs_teacher`, `needs_reference`, `needs_critic`, κ).

The start-up check of a config against these specs is config/estimator.py.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from verl_masopd.algos.cure import finish_cure, prepare_cure, rollout_matrices
from verl_masopd.algos.distillation import DistillationSettings
from verl_masopd.algos.frozen import finish_frozen
from verl_masopd.algos.grpo import GrpoOptions, finish_grpo, prepare_grpo
from verl_masopd.algos.judge_grpo import prepare_judge_grpo
from verl_masopd.algos.magrpo import MagrpoOptions
from verl_masopd.algos.marft import MarftOptions
from verl_masopd.algos.masopd import MasopdOptions, masopd_token_terms, opd_token_terms, prepare_distillation
from verl_masopd.algos.options import read_options
from verl_masopd.algos.per_role import PER_ROLE, role_entries
from verl_masopd.algos.rewards import RewardWeights

ALL_SHARING = frozenset({"role", "agent", "shared"})


@dataclass(frozen=True)
class EstimatorSpec:
    """What an estimator serves and needs; the defaults are those of most estimators.

    `joint_batch`: advantages need every policy's rows together (the chain crosses policies).
    `uses_local_reward`: the reward is team + local (False: team only; None: no batch reward).
    `max_agents_per_role`: the most agents of one role the estimator serves (None: any).
    `grad_clip_option`, `contrast_roles_option`: the option field that replaces the actor's
    grad_clip, and the one that gives κ (None: the actor's grad_clip; κ = 0).
    `group_baseline`: "rows" when the baseline is a mean over the rows of a group, "episodes" when
    over the group's episodes (None: no group baseline).
    `no_task_distillation`: why the OPD term of `distillation.distillation_loss.use_task_rewards`
    cannot be added to its advantage (None: it can, A_k = A^est_k + λ · d_k, distillation.py)."""

    name: str
    workflows: frozenset[str] = frozenset({"mas"})
    domains: frozenset[str] = frozenset({"code", "math", "qa"})
    policy_sharing: frozenset[str] = ALL_SHARING
    needs_teacher: bool = False
    needs_judge: bool = False
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
    episodes: bool = False
    from_rollout: Callable[[Any, Any], dict] | None = None
    prepare: Callable[[Any, "EstimatorSettings"], dict] | None = None
    finish: Callable[[Any, Any, dict], Any] | None = None
    token_terms: Callable[[Any, Any], dict] | None = None
    grad_clip_option: str | None = None
    contrast_roles_option: str | None = None
    group_baseline: str | None = None
    no_task_distillation: str | None = None


# Independent policies (no single model playing every seat).
INDEPENDENT_POLICIES = frozenset({"role", "agent"})
# ℓS for the teacher estimators: the engine's old log-probs, else the sampling ones.
STUDENT_LOG_PROBS = ("old_log_probs", "rollout_log_probs")
TEACHER_PATH = "teacher.model_path"
SELF_SOURCES = ("frozen", "live")  # teacher.source values with no teacher model (config/run.py)
TEACHER_ONLY = "its advantage is the distillation signal itself, with no task reward to add it to"

ESTIMATORS: dict[str, EstimatorSpec] = {
    spec.name: spec
    for spec in (
        EstimatorSpec(
            "masopd",
            needs_teacher=True,
            uses_local_reward=None,
            options=("masopd", MasopdOptions),
            required_keys=(TEACHER_PATH,),
            fields=("teacher_log_probs", "teacher_contrast_log_probs"),
            optional_fields=STUDENT_LOG_PROBS,
            prepare=prepare_distillation,
            contrast_roles_option="num_contrast_roles",
            token_terms=masopd_token_terms,
            no_task_distillation=TEACHER_ONLY,
        ),
        EstimatorSpec(
            "opd",
            workflows=frozenset({"mas", "sa"}),
            needs_teacher=True,
            uses_local_reward=None,
            required_keys=(TEACHER_PATH,),
            fields=("teacher_log_probs",),
            optional_fields=STUDENT_LOG_PROBS,
            prepare=prepare_distillation,
            token_terms=opd_token_terms,
            no_task_distillation=TEACHER_ONLY,
        ),
        EstimatorSpec(
            "frozen",
            workflows=frozenset({"mas", "sa"}),
            uses_local_reward=None,
            finish=finish_frozen,
            no_task_distillation="its rows enter no loss",
        ),
        EstimatorSpec(
            "grpo",
            workflows=frozenset({"mas", "sa"}),
            options=("grpo", GrpoOptions),
            prepare=prepare_grpo,
            finish=finish_grpo,
            group_baseline="rows",
        ),
        EstimatorSpec(
            "magrpo",
            policy_sharing=INDEPENDENT_POLICIES,
            uses_local_reward=False,
            policy_loss="gpg",
            loss_agg_mode="seq-mean-token-sum",
            options=("magrpo", MagrpoOptions),
            fields=("turn", "num_turns"),
            episodes=True,
            group_baseline="episodes",
        ),
        EstimatorSpec(
            "marft",
            policy_sharing=INDEPENDENT_POLICIES,
            needs_critic=True,
            joint_batch=True,
            policy_loss="marft",
            loss_agg_mode="seq-mean-token-mean",
            options=("marft", MarftOptions),
            fields=("critic_values", "turn", "role", "agent_index"),
            episodes=True,
            grad_clip_option="max_grad_norm",
        ),
        EstimatorSpec(
            "cure",
            domains=frozenset({"code"}),
            policy_sharing=frozenset({"shared"}),
            needs_reference=True,
            uses_local_reward=None,
            max_agents_per_role=1,
            from_rollout=rollout_matrices,
            prepare=prepare_cure,
            finish=finish_cure,
            no_task_distillation=(
                "its one shared policy is already anchored to the reference policy by the actor's KL loss "
                "(use_kl_loss, k3); a second anchor on the same tokens, to a teacher conditioned on one of "
                "the roles that policy plays, is not defined by CURE"
            ),
        ),
        EstimatorSpec("at_grpo", tree_sampling=True, fields=("uid", "agent", "turn"), group_baseline="rows"),
        EstimatorSpec(
            "judge_grpo",
            needs_judge=True,
            uses_local_reward=None,
            options=("grpo", GrpoOptions),
            required_keys=(TEACHER_PATH,),
            fields=("judge_score",),
            prepare=prepare_judge_grpo,
            finish=finish_grpo,
            group_baseline="rows",
        ),
    )
}


# Every option section under `algorithm`: verl's AlgoConfig does not know them.
OPTION_SECTIONS: dict[str, type] = {"reward": RewardWeights} | {
    spec.options[0]: spec.options[1] for spec in ESTIMATORS.values() if spec.options is not None
}


ESTIMATOR_KEY = "algorithm.adv_estimator"


@dataclass(frozen=True)
class EstimatorSettings:
    """The estimator of a run with its validated options, read once from `algorithm`.

    `per_role`: each role listed in `algorithm.per_role` with its own estimator ({}: one
    estimator for every row); `roles`: the workflow's roles, when known, so that this estimator
    counts as in play only when some role is not listed. The needs below are those of every
    estimator in play (`estimators`)."""

    spec: EstimatorSpec
    options: Any
    reward: RewardWeights
    norm_adv_by_std_in_grpo: bool = True
    per_role: Mapping[str, "RoleEstimator"] = field(default_factory=dict)
    roles: tuple[str, ...] = ()
    distillation: DistillationSettings = DistillationSettings()

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def estimators(self) -> tuple["EstimatorSettings", ...]:
        """The estimators in play: this one alone without `per_role`; else each listed role's, and
        this one unless every role of `roles` is listed."""
        if not self.per_role:
            return (self,)
        listed = tuple(entry.settings for entry in self.per_role.values())
        unlisted = not self.roles or any(role not in self.per_role for role in self.roles)
        return listed + ((self,) if unlisted else ())

    def role_estimator(self, role: str) -> "RoleEstimator":
        """`role`'s entry of `per_role`, else this estimator grouped by problem."""
        if role in self.per_role:
            return self.per_role[role]
        return RoleEstimator(replace(self, per_role={}, roles=()), "problem", ESTIMATOR_KEY)

    @property
    def adds_distillation(self) -> bool:
        """This estimator's advantage gets λ · d_k (use_task_rewards, distillation.py)."""
        return self.distillation.use_task_rewards and self.spec.no_task_distillation is None

    @property
    def distillation_weight(self) -> float:
        """w of this estimator's rows in the engine's distillation loss (trainer/distillation_loss.py):
        1 for a teacher estimator, λ when its advantage gets the OPD term, else 0."""
        if self.spec.needs_teacher:
            return 1.0
        return self.distillation.coef if self.adds_distillation else 0.0

    @property
    def uses_teacher(self) -> bool:
        """This estimator reads the teacher's scores: by its spec, or for the OPD term."""
        return self.spec.needs_teacher or self.adds_distillation

    @property
    def needs_teacher(self) -> bool:
        return any(settings.uses_teacher for settings in self.estimators)

    @property
    def needs_judge(self) -> bool:
        return any(settings.spec.needs_judge for settings in self.estimators)

    @property
    def needs_reference(self) -> bool:
        return any(settings.spec.needs_reference for settings in self.estimators)

    @property
    def needs_critic(self) -> bool:
        return any(settings.spec.needs_critic for settings in self.estimators)

    def actor_grad_clip(self, actor_grad_clip: float) -> float:
        """The actor's gradient clip, or the option that replaces it of the estimator in play that
        has one (never one of several: such an estimator cannot run per role)."""
        for settings in self.estimators:
            if settings.spec.grad_clip_option is not None:
                return getattr(settings.options, settings.spec.grad_clip_option)
        return actor_grad_clip

    @property
    def own_contrast_roles(self) -> int:
        """κ of this estimator alone: its option that gives it, else 0."""
        option = self.spec.contrast_roles_option
        return 0 if option is None else getattr(self.options, option)

    @property
    def num_contrast_roles(self) -> int:
        """κ, the contrasting role conditions the teacher scores: max over the estimators in play (0: none)."""
        return max(settings.own_contrast_roles for settings in self.estimators)


@dataclass(frozen=True)
class RoleEstimator:
    """One role's estimator: its settings (no `per_role` of their own), the group key of the
    role's rows (per_role.py) and the config key that chose it."""

    settings: EstimatorSettings
    group_by: str
    key: str


def _settings(
    spec: EstimatorSpec, sections: dict[str, Any], algorithm: Mapping, distillation: DistillationSettings
) -> EstimatorSettings:
    return EstimatorSettings(
        spec=spec,
        options=sections[spec.options[0]] if spec.options is not None else None,
        reward=sections["reward"],
        norm_adv_by_std_in_grpo=bool(algorithm.get("norm_adv_by_std_in_grpo", True)),
        distillation=distillation,
    )


def read_estimator(
    algorithm: Mapping, roles: tuple[str, ...] = (), distillation: DistillationSettings = DistillationSettings()
) -> EstimatorSettings:
    """The settings of `algorithm.adv_estimator`, with those of `algorithm.per_role`'s roles;
    every option section is validated (unknown keys, bad values raise a ConfigError naming the
    key), whichever estimators run. `roles`: the workflow's roles, when known; `distillation`:
    the run's `distillation.distillation_loss` (config/distillation.py), for every estimator."""
    name = algorithm.get("adv_estimator")
    if name is None:
        raise ValueError(f"{ESTIMATOR_KEY} is missing")
    spec = estimator_spec(name)
    sections = {section: read_options(algorithm, section, cls) for section, cls in OPTION_SECTIONS.items()}
    per_role = {
        role: RoleEstimator(
            _settings(
                estimator_spec(estimator, f"algorithm.{PER_ROLE}.{role}.estimator"), sections, algorithm, distillation
            ),
            group_by,
            f"algorithm.{PER_ROLE}.{role}.estimator",
        )
        for role, (estimator, group_by) in role_entries(algorithm).items()
    }
    return replace(_settings(spec, sections, algorithm, distillation), per_role=per_role, roles=tuple(roles))


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


def estimator_spec(name: str, key: str = ESTIMATOR_KEY) -> EstimatorSpec:
    """The spec of estimator `name`; an unknown one is named with the config key `key` that chose it."""
    if name not in ESTIMATORS:
        raise ValueError(f"{key}={name!r} is not one of {sorted(ESTIMATORS)}")
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
