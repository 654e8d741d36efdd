"""The start-up check of a config against the estimators' specs (algos/specs.py): whether the chosen
estimator(s) serve the workflow and the rest of the config, read once into `EstimatorSettings`.

Config keys read here (the trainer's config extends verl's ppo_trainer config):
    algorithm.adv_estimator                         the estimator name (ESTIMATORS)
    algorithm.per_role.<role>.{estimator, group_by} a role's own estimator and grouping (algos/per_role.py)
    algorithm.<section>.*                           the estimator's options (unknown keys rejected)
    algorithm.reward.*                              reward weights (algos/rewards.py)
    algorithm.use_kl_in_reward                      verl's reward KL: must be false for every estimator
    workflow.name, workflow.domain ("code" | "math"), workflow.policy_sharing; a spec's `workflows`
                                                    names kinds: "mas" (two or more roles), "sa" (one)
    rollout.tree_sampling                           true only with at_grpo
    rollout.group_size, workflow.agents_per_role, workflow.horizon
                                                    enough rows per group for a role's group baseline
    teacher.model_path                              required by masopd, opd and judge_grpo, and by
                                                    a reward estimator with the OPD term, unless
                                                    teacher.source is frozen or live
    workflow.name                                   judge_grpo only on roles the workflow judges
                                                    (`Workflow.judged_roles`)
    distillation.distillation_loss.*                the OPD term's loss mode, and the term on a reward
                                                    estimator's advantage (algos/distillation.py)
    actor_rollout_ref.actor.{policy_loss.loss_mode, loss_agg_mode, use_kl_loss, kl_loss_type}
                                                    must match `actor_settings(name)` where present
Keys that are absent are not checked; present ones with a wrong value raise a ValueError that
names the key. With `algorithm.per_role`, every check runs for each role's estimator (its key
named: `algorithm.per_role.<role>.estimator`, or `algorithm.adv_estimator` for a role not listed),
and further (`_validate_per_role`): the roles exist; the estimator can run on one role's rows
(no critic, joint batch, tree sampling, reference policy, rollout groups or own gradient clip);
roles training one shared policy have one actor loss; a listed role's reward estimator gets a
reward; a listed role's group baseline has groups of two or more.
"""

from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl_masopd.algos.distillation import DistillationSettings
from verl_masopd.algos.per_role import PER_ROLE
from verl_masopd.algos.specs import (
    ESTIMATOR_KEY,
    SELF_SOURCES,
    TEACHER_PATH,
    EstimatorSettings,
    EstimatorSpec,
    RoleEstimator,
    actor_settings,
    estimator_spec,
    read_estimator,
)
from verl_masopd.config.distillation import read_distillation
from verl_masopd.workflows import workflow_class, workflow_kind


def _select(config: DictConfig, key: str) -> Any:
    return OmegaConf.select(config, key, default=None)


def _self_teacher(config: DictConfig) -> bool:
    """teacher.source frozen or live: each policy is its own teacher, so no teacher.model_path is needed."""
    return _select(config, "teacher.source") in SELF_SOURCES


def _check_choice(config: DictConfig, key: str, allowed: frozenset[str], chosen: str) -> None:
    value = _select(config, key)
    if value is not None and value not in allowed:
        raise ValueError(f"{key}={value!r} cannot be used with {chosen}; allowed: {sorted(allowed)}")


def _check_workflow_kind(config: DictConfig, allowed: frozenset[str], chosen: str) -> None:
    workflow, domain = _select(config, "workflow.name"), _select(config, "workflow.domain")
    if workflow is None or domain is None:
        return
    kind = workflow_kind(workflow, domain)
    if kind not in allowed:
        raise ValueError(
            f"workflow.name={workflow!r} (kind {kind!r}) cannot be used with {chosen}; allowed kinds: {sorted(allowed)}"
        )


def validate_estimator_config(config: DictConfig) -> EstimatorSettings:
    """Check the estimator(s) against the rest of the config; returns the settings, raises
    ValueError naming the key."""
    name = _select(config, ESTIMATOR_KEY)
    if name is None:
        raise ValueError(f"{ESTIMATOR_KEY} is missing")
    distillation = read_distillation(config)
    if _select(config, f"algorithm.{PER_ROLE}"):
        return _validate_per_role(config, distillation)
    spec = estimator_spec(name)
    _check_estimator(config, spec, ESTIMATOR_KEY, distillation)
    if spec.needs_judge:
        _check_judged(config, None, f"{ESTIMATOR_KEY}={name}")
    settings = read_estimator(config.algorithm, distillation=distillation)
    _check_contrast_roles(config, settings)
    return settings


def _check_estimator(config: DictConfig, spec: EstimatorSpec, key: str, distillation: DistillationSettings) -> None:
    """The checks of one estimator against the rest of the config; `key` chose it."""
    name = spec.name
    chosen = f"{key}={name}"
    _check_task_distillation(config, spec, chosen, distillation)
    _check_workflow_kind(config, spec.workflows, chosen)
    _check_choice(config, "workflow.domain", spec.domains, chosen)
    _check_choice(config, "workflow.policy_sharing", spec.policy_sharing, chosen)
    agents_per_role = _select(config, "workflow.agents_per_role")
    if spec.max_agents_per_role is not None and agents_per_role is not None:
        if agents_per_role > spec.max_agents_per_role:
            raise ValueError(
                f"workflow.agents_per_role={agents_per_role} cannot be used with {chosen}, "
                f"which serves at most {spec.max_agents_per_role} agent(s) per role"
            )
    for required in spec.required_keys:
        if _select(config, required) in (None, "") and not (required == TEACHER_PATH and _self_teacher(config)):
            raise ValueError(f"{required} is required by {chosen}")

    tree_sampling = bool(_select(config, "rollout.tree_sampling"))
    if tree_sampling != spec.tree_sampling:
        raise ValueError(f"rollout.tree_sampling must be {str(spec.tree_sampling).lower()} with {chosen}")
    if _select(config, "algorithm.use_kl_in_reward"):
        raise ValueError(f"algorithm.use_kl_in_reward must be false with {chosen}")

    for actor_key, expected in actor_settings(name).items():
        value = _select(config, f"actor_rollout_ref.actor.{actor_key}")
        if value is not None and value != expected:
            raise ValueError(
                f"actor_rollout_ref.actor.{actor_key}={value!r} contradicts {chosen}, which needs {expected!r}"
            )


def _check_task_distillation(
    config: DictConfig, spec: EstimatorSpec, chosen: str, distillation: DistillationSettings
) -> None:
    """The OPD term on a reward estimator's advantage needs an estimator that takes it and a teacher."""
    if not distillation.use_task_rewards:
        return
    key = "distillation.distillation_loss.use_task_rewards=true"
    if spec.no_task_distillation is not None:
        raise ValueError(f"{key} cannot be used with {chosen}: {spec.no_task_distillation}")
    if _select(config, TEACHER_PATH) in (None, "") and not _self_teacher(config):
        raise ValueError(f"{TEACHER_PATH} is required by {key} (the OPD term) with {chosen}")


def _check_contrast_roles(config: DictConfig, settings: EstimatorSettings) -> None:
    """κ contrasting roles must exist: C_r holds role types other than r."""
    workflow, domain = _select(config, "workflow.name"), _select(config, "workflow.domain")
    if workflow is None or domain is None:
        return
    others, kappa = len(workflow_class(workflow, domain).roles) - 1, settings.own_contrast_roles
    if kappa > others:
        raise ValueError(
            f"algorithm.{settings.spec.options[0]}.{settings.spec.contrast_roles_option}={kappa} exceeds the "
            f"{others} other role type(s) of workflow.name={workflow}"
        )


def _check_judged(config: DictConfig, role: str | None, chosen: str) -> None:
    """An estimator on the judge's score needs a workflow that judges the replies of `role` (of
    every role when None)."""
    workflow, domain = _select(config, "workflow.name"), _select(config, "workflow.domain")
    if workflow is None or domain is None:
        return
    cls = workflow_class(workflow, domain)
    unjudged = [r for r in ((role,) if role else cls.roles) if r not in cls.judged_roles]
    if unjudged:
        judged = f"only {list(cls.judged_roles)}" if cls.judged_roles else "none"
        raise ValueError(
            f"{chosen}: workflow.name={workflow} puts no reply of role {unjudged[0]!r} to a judge (it judges {judged})"
        )


def _not_per_role(spec: EstimatorSpec) -> str | None:
    """Why the estimator cannot run on one role's rows alone (None: it can)."""
    reasons = (
        (spec.needs_critic, "it trains a critic"),
        (spec.joint_batch, "its advantages need every policy's rows together"),
        (spec.tree_sampling, "it needs tree sampling"),
        (spec.needs_reference, "it needs a reference policy"),
        (spec.from_rollout is not None, "it reads the step's rollout groups"),
        (spec.grad_clip_option is not None, "it replaces the gradient clip of every policy"),
    )
    return next((reason for applies, reason in reasons if applies), None)


def _validate_per_role(config: DictConfig, distillation: DistillationSettings) -> EstimatorSettings:
    """`algorithm.per_role` against the workflow and the rest of the config (module doc)."""
    workflow, domain = _select(config, "workflow.name"), _select(config, "workflow.domain")
    if workflow is None or domain is None:
        raise ValueError(f"algorithm.{PER_ROLE} needs workflow.name and workflow.domain to know the roles")
    roles = workflow_class(workflow, domain).roles
    settings = read_estimator(config.algorithm, roles, distillation)
    for role in settings.per_role:
        if role not in roles:
            raise ValueError(
                f"algorithm.{PER_ROLE}.{role}: workflow.name={workflow} ({domain}) has no role {role!r}; "
                f"roles: {list(roles)}"
            )
    chosen = {role: settings.role_estimator(role) for role in roles}
    for role, entry in chosen.items():
        reason = _not_per_role(entry.settings.spec)
        if reason is not None:
            raise ValueError(f"{entry.key}={entry.settings.name} cannot run on role {role}'s rows alone: {reason}")
    _check_shared_loss(config, chosen)
    for role, entry in chosen.items():
        _check_estimator(config, entry.settings.spec, entry.key, distillation)
        if entry.settings.spec.needs_judge:
            _check_judged(config, role, f"{entry.key}={entry.settings.name}")
        if role in settings.per_role:
            _check_reward(role, entry)
            _check_groups(config, role, entry)
    for estimator in settings.estimators:
        _check_contrast_roles(config, estimator)
    return settings


def _check_shared_loss(config: DictConfig, chosen: dict[str, RoleEstimator]) -> None:
    """Roles that train one policy (workflow.policy_sharing=shared: every role) need one actor
    loss; the agents of one role share its estimator already."""
    if _select(config, "workflow.policy_sharing") != "shared":
        return
    (first_role, first), *others = chosen.items()
    for role, entry in others:
        if actor_settings(entry.settings.name) != actor_settings(first.settings.name):
            raise ValueError(
                f"{first.key}={first.settings.name} (role {first_role}) and {entry.key}={entry.settings.name} "
                f"(role {role}) train one policy (workflow.policy_sharing=shared) with different actor losses: "
                f"{actor_settings(first.settings.name)} and {actor_settings(entry.settings.name)}"
            )


def _check_reward(role: str, entry: RoleEstimator) -> None:
    """A reward estimator needs a reward to reach the role: r = w_team · r_team + w_local · b · r_local
    (algos/rewards.py). Every workflow gives every role the team reward r_team, and the built-in ones a
    role-local r_local to every role (no workflow declares otherwise), so the role gets none only
    when w_team = 0 and the estimator drops the local term or w_local = 0."""
    spec, weights = entry.settings.spec, entry.settings.reward
    if spec.uses_local_reward is None or weights.team_weight > 0:
        return
    if spec.uses_local_reward and weights.local_weight > 0:
        return
    zero = "algorithm.reward.team_weight=0" + (" and algorithm.reward.local_weight=0" if spec.uses_local_reward else "")
    raise ValueError(f"{entry.key}={spec.name} trains on a reward, but role {role} gets none: {zero}")


def _check_groups(config: DictConfig, role: str, entry: RoleEstimator) -> None:
    """A group baseline needs two or more members per group: a problem's group holds its G
    episodes; an episode's (a turn's) group is one episode, with at most n·T (n) rows of the role
    (n agents per role, horizon T)."""
    spec, group_by = entry.settings.spec, entry.group_by
    if spec.group_baseline is None:
        return
    culprit = f"algorithm.{PER_ROLE}.{role}.group_by={group_by} with {entry.key}={spec.name}"
    if group_by == "problem":
        size, keys = _select(config, "rollout.group_size"), "rollout.group_size"
    elif spec.group_baseline == "episodes":
        raise ValueError(f"{culprit}: its baseline centres over a group's episodes, and each group holds one episode")
    else:
        agents = _select(config, "workflow.agents_per_role")
        horizon = 1 if group_by == "turn" else _select(config, "workflow.horizon")
        size = None if agents is None or horizon is None else agents * horizon
        keys = "workflow.agents_per_role" + (" and workflow.horizon" if group_by == "episode" else "")
    if size is not None and size < 2:
        raise ValueError(f"{culprit}: its group baseline needs two or more per group, and {keys} give {size}")
