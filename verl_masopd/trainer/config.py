"""Start-up validation of the composed config, read into small dataclasses.

`validate_config(cfg)` runs once before anything starts and raises `ConfigError` naming the
culprit key(s):
  1. the estimator against the rest (`verl_masopd.algos.checks.validate_estimator_config`), the
     per-role estimators of `algorithm.per_role` likewise, and every estimator option section
     under `algorithm` (unknown keys, bad values), read once into the typed `EstimatorSettings`
     the trainer hands down;
  2. each project section (workflow, rollout, students, teacher, pac) merged into its schema
     below: an unknown key, a missing value or a wrong type is named with its full key;
  3. the rules that span sections (`_check_*`): the workflow builds, per-policy starting points
     name real policies and are not combined with one shared policy, model folders and data
     files exist, teacher and students share a tokenizer, logging backends exist.
verl's own sections are validated by verl's dataclasses: `actor_rollout_ref.actor` is converted
here, once, to verl's `FSDPActorConfig` (trainer/actor_loss.py) and its settings the trainer would
ignore are refused; `verl_algo_config` converts `algorithm` without the project's estimator
sections and `per_role`, which verl's structured `AlgoConfig` would reject.

The composed config is read here and nowhere else: the trainer and everything it builds take the
`RunConfig` (or the part they need), whose `composed` record is what checkpoints save and hash.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields, replace
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import (
    ConfigKeyError,
    InterpolationResolutionError,
    InterpolationToMissingValueError,
    MissingMandatoryValue,
    OmegaConfBaseException,
)
from verl.trainer.config import AlgoConfig
from verl.trainer.config.algorithm import RolloutCorrectionConfig
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.tracking import Tracking

from verl_masopd.algos.checks import validate_estimator_config
from verl_masopd.algos.per_role import PER_ROLE
from verl_masopd.algos.specs import OPTION_SECTIONS, SELF_SOURCES, EstimatorSettings
from verl_masopd.config_errors import ConfigError, require
from verl_masopd.context import LAYOUTS
from verl_masopd.engine.policy_engine import Lora
from verl_masopd.extensions import import_extensions
from verl_masopd.rollout.backend import SamplingParams
from verl_masopd.rollout.policies import SHARINGS, policies_of
from verl_masopd.teacher.teachers import Teachers, read_teachers
from verl_masopd.trainer.actor_loss import ActorLoss, actor_loss, check_actor_settings
from verl_masopd.trainer.checkpoint import RESUME_MODES
from verl_masopd.trainer.lora import policy_loras
from verl_masopd.trainer.model_conventions import check_model_conventions
from verl_masopd.workflows import make_workflow
from verl_masopd.workflows.base import Workflow
from verl_masopd.workflows.prompted import PROMPT_STYLES

PAC_ATTRIBUTIONS = ("rules", "model")
PLACEMENTS = ("ray", "local")
ENGINE_DTYPES = ("float32", "bfloat16")
DEVICES = ("cpu", "cuda", "npu")
VLLM_MAX_LORA_RANK = 512  # the largest of vLLM's allowed `max_lora_rank` values (vllm.config.lora.MaxLoRARanks)
LORA_BASE = "lora_base"  # the teacher is a LoRA policy's base model, scored on its engine with the adapter off
TEACHER_BACKENDS = ("engine", "vllm", LORA_BASE)
# teacher.source: a model of its own (path), or each policy itself, at step 0 (frozen) or now (live)
PATH = "path"
FROZEN, LIVE = SELF_SOURCES
TEACHER_SOURCES = (PATH, FROZEN, LIVE)
REFERENCE = "reference"  # teacher.privileged: the problem's reference in the teacher's contexts


def _one_of(key: str, value, choices) -> None:
    require(value in choices, key, f"must be one of {tuple(choices)}, got {value!r}")


def _at_least(key: str, value, minimum) -> None:
    require(value >= minimum, key, f"must be >= {minimum}, got {value}")


@dataclass
class ExecTimeouts:
    code: float
    math: float


@dataclass
class WorkflowSection:
    name: str
    domain: str
    agents_per_role: int
    horizon: int
    policy_sharing: str
    exec_timeout_s: ExecTimeouts
    context_layout: str
    prompt_style: str
    options: dict[str, Any]

    def __post_init__(self):
        _one_of("workflow.policy_sharing", self.policy_sharing, SHARINGS)
        _one_of("workflow.context_layout", self.context_layout, LAYOUTS)
        _at_least("workflow.agents_per_role", self.agents_per_role, 1)
        require(
            self.name != "sa" or self.agents_per_role == 1,
            "workflow.agents_per_role",
            f"the single-agent workflow 'sa' has one agent, got {self.agents_per_role}",
        )
        _at_least("workflow.horizon", self.horizon, 1)
        require("timeout" not in self.options, "workflow.options.timeout", "use workflow.exec_timeout_s.<domain>")
        require("prompt_style" not in self.options, "workflow.options.prompt_style", "use workflow.prompt_style")
        _one_of("workflow.prompt_style", self.prompt_style, PROMPT_STYLES)
        for domain in ("code", "math"):
            seconds = getattr(self.exec_timeout_s, domain)
            require(seconds > 0, f"workflow.exec_timeout_s.{domain}", f"must be > 0 seconds, got {seconds}")


@dataclass
class RolloutSection:
    group_size: int
    tree_sampling: bool
    turn_barrier: bool
    max_off_policy: int

    def __post_init__(self):
        _at_least("rollout.group_size", self.group_size, 1)
        _at_least("rollout.max_off_policy", self.max_off_policy, 0)
        require(
            not self.tree_sampling or self.group_size >= 2,
            "rollout.group_size",
            f"tree sampling needs at least 2 branches per problem, got {self.group_size}",
        )


@dataclass
class StudentsSection:
    path: str
    policy_paths: dict[str, str]
    lora: dict[str, dict]  # read by trainer/lora.py


@dataclass
class TeacherSection:
    model_path: Optional[str]
    max_context_length: int
    share_prefix: Optional[bool]
    backend: str
    source: str
    privileged: Optional[str]

    def __post_init__(self):
        _at_least("teacher.max_context_length", self.max_context_length, 2)
        _one_of("teacher.backend", self.backend, TEACHER_BACKENDS)
        _one_of("teacher.source", self.source, TEACHER_SOURCES)
        require(
            self.privileged in (None, REFERENCE),
            "teacher.privileged",
            f"must be null or {REFERENCE}, got {self.privileged!r}",
        )
        require(
            self.source == PATH or not self.model_path,
            "teacher.model_path",
            f"must be null with teacher.source={self.source}: the teacher is each policy itself, got {self.model_path}",
        )
        require(
            self.source == PATH or self.backend != LORA_BASE,
            "teacher.backend",
            f"lora_base names a model by teacher.model_path; with teacher.source={self.source} a LoRA policy's "
            "teacher is already its own engine (frozen: adapter off, live: adapter on); use engine",
        )
        require(
            self.source != LIVE or self.backend != "vllm",
            "teacher.backend",
            "vllm serves a fixed model; teacher.source=live scores with each policy's own engine, whose weights "
            "are the policy's now: use engine",
        )
        require(
            not (self.share_prefix is True and self.backend == "vllm"),
            "teacher.share_prefix",
            "true scores on the engine teacher; teacher.backend=vllm reuses shared prefixes through vLLM's "
            "prefix cache instead: set teacher.share_prefix=false",
        )


@dataclass
class PacSection:
    enable: bool
    attribution: str
    reveal_reference: bool

    def __post_init__(self):
        _one_of("pac.attribution", self.attribution, PAC_ATTRIBUTIONS)


@dataclass
class EnginesSection:
    placement: str
    gpus_per_engine: int
    dtype: str
    placement_wait_s: float
    max_tokens_per_micro_batch: int

    def __post_init__(self):
        _one_of("engines.placement", self.placement, PLACEMENTS)
        _at_least("engines.gpus_per_engine", self.gpus_per_engine, 1)
        _at_least("engines.max_tokens_per_micro_batch", self.max_tokens_per_micro_batch, 1)
        _one_of("engines.dtype", self.dtype, ENGINE_DTYPES)
        require(
            math.isfinite(self.placement_wait_s) and self.placement_wait_s > 0,
            "engines.placement_wait_s",
            f"must be > 0 seconds, got {self.placement_wait_s}",
        )


@dataclass
class DataSection:
    """The `data` keys the trainer reads (the file lists are checked by `_data_files`)."""

    train_batch_size: int
    max_prompt_length: int
    max_response_length: int
    seed: int

    def __post_init__(self):
        _at_least("data.train_batch_size", self.train_batch_size, 1)
        _at_least("data.max_prompt_length", self.max_prompt_length, 1)
        _at_least("data.max_response_length", self.max_response_length, 1)


@dataclass
class TrainerSection:
    """The `trainer` keys the trainer reads; verl's other trainer keys are left to verl."""

    total_training_steps: int
    seed: int
    save_freq: int
    test_freq: int
    val_before_train: bool
    resume_mode: str
    resume_from_path: Optional[str]
    default_local_dir: str
    max_actor_ckpt_to_keep: Optional[int]
    device: str
    n_gpus_per_node: int
    project_name: str
    experiment_name: str
    logger: Any  # a backend name or a list of them, read as a tuple

    def __post_init__(self):
        self.logger = (self.logger,) if isinstance(self.logger, str) else tuple(self.logger)
        _at_least("trainer.total_training_steps", self.total_training_steps, 0)
        _one_of("trainer.device", self.device, DEVICES)
        _one_of("trainer.resume_mode", self.resume_mode, RESUME_MODES)
        require(
            self.resume_mode != "resume_path" or bool(self.resume_from_path),
            "trainer.resume_from_path",
            "trainer.resume_mode=resume_path needs the checkpoint folder to resume from",
        )


@dataclass
class ServingSection:
    """verl's `actor_rollout_ref.rollout` keys the trainer reads: the generation path (`name`: hf
    or vllm) and the layout and seed of one vLLM replica."""

    name: str
    tensor_model_parallel_size: int
    data_parallel_size: int
    pipeline_model_parallel_size: int
    n_gpus_per_node: int
    seed: int

    @property
    def world_size(self) -> int:
        """GPUs of one vLLM replica: TP · DP · PP."""
        return self.tensor_model_parallel_size * self.data_parallel_size * self.pipeline_model_parallel_size

    @property
    def nodes(self) -> int:
        """Nodes one replica spans (verl's RolloutReplica: world size over GPUs per node)."""
        return self.world_size // min(self.n_gpus_per_node, self.world_size)


@dataclass(frozen=True)
class RunConfig:
    """The validated settings of a run: the project's sections, the verl keys the trainer reads
    (`serving`, `actor`: verl's actor config and loss), and `composed`, the resolved config as a
    record (plain containers, never changed): what a checkpoint saves as config.yaml and hashes for
    resuming, what the trackers receive, and what the copies for verl's own workers start from."""

    workflow: WorkflowSection
    rollout: RolloutSection
    students: StudentsSection
    teacher: TeacherSection
    pac: PacSection
    engines: EnginesSection
    data: DataSection
    trainer: TrainerSection
    serving: ServingSection
    actor: ActorLoss
    estimator: EstimatorSettings
    policies: tuple[str, ...]
    train_files: tuple[str, ...]
    val_files: tuple[str, ...]
    train_sampling: SamplingParams
    val_sampling: SamplingParams
    built_workflow: Workflow  # the workflow `workflow` describes, built once by the validation
    loras: dict[str, Lora | None] = field(default_factory=dict)  # each policy's adapter (trainer/lora.py)
    teachers: Teachers = field(default_factory=lambda: Teachers(()))  # teacher/teachers.py
    # verl's algorithm.rollout_correction: the correction of stale rows (trainer/staleness.py)
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
    composed: dict = field(default_factory=dict)

    def policy_path(self, policy: str) -> str:
        """The folder policy `policy` starts from: its own entry in students.policy_paths, else students.path."""
        return self.students.policy_paths.get(policy, self.students.path)

    @property
    def hybrid(self) -> bool:
        """The policies are verl's hybrid vLLM workers: the vllm generation path with full fine-tuning
        (with LoRA, the policies share a multi-LoRA server per base instead)."""
        return self.serving.name == "vllm" and not any(self.loras.values())

    @property
    def self_teacher(self) -> bool:
        """teacher.source is frozen or live: each policy is its own teacher (no teacher model)."""
        return self.teacher.source != PATH

    def teacher_policy(self) -> str | None:
        """teacher.backend=lora_base: the first policy with LoRA that starts from teacher.model_path
        (its engine scores as the teacher, adapter off); None otherwise."""
        if self.teacher.backend != LORA_BASE:
            return None
        return next(p for p in self.policies if self.loras.get(p) and self.policy_path(p) == self.teacher.model_path)


def build_workflow(w: WorkflowSection) -> Workflow:
    """The workflow the section describes, with the execution timeout of its domain (qa runs no programs)."""
    timeout = getattr(w.exec_timeout_s, w.domain, None)
    options = {"timeout": timeout} if timeout is not None else {}
    return make_workflow(
        w.name, w.domain, w.agents_per_role, w.horizon, prompt_style=w.prompt_style, **options, **w.options
    )


def composed_record(cfg: DictConfig) -> dict:
    """`cfg` with every interpolation resolved, as plain containers (`cfg` is not changed): the
    record a run keeps (`RunConfig.composed`, a checkpoint's config.yaml), with teacher.model_path
    set to the first teacher of `distillation.teacher_models` when it names none. An interpolation
    that fails (an unknown estimator in `${masopd_actor:...}`, an unset environment variable) is a
    ConfigError naming its key; one that refers to a missing value (`???`) names that value's key."""
    try:
        record = OmegaConf.to_container(cfg, resolve=True)
    except InterpolationToMissingValueError as e:
        unresolved = OmegaConf.to_container(cfg, resolve=False)
        missing = [key for key in _missing_keys(unresolved) if f"Missing mandatory value: {key}" in str(e)]
        raise ConfigError(f"{missing[0]}: a value is required" if missing else str(e).splitlines()[0]) from None
    except InterpolationResolutionError as e:
        root = e
        while (root.__cause__ or root.__context__) is not None:
            root = root.__cause__ or root.__context__
        if not isinstance(root, OmegaConfBaseException):  # a resolver's own error names its key
            raise ConfigError(str(root)) from None
        message = str(e).splitlines()[0]
        raise ConfigError(message if e.full_key is None else f"{e.full_key}: {message}") from None
    models = (record.get("distillation") or {}).get("teacher_models") or {}
    named = [str(entry["model_path"]) for entry in models.values() if entry and entry.get("model_path")]
    if named and not (record.get("teacher") or {}).get("model_path"):
        record["teacher"]["model_path"] = named[0]
    return record


def _missing_keys(node, prefix: str = ""):
    """The dotted keys whose value is missing (`???`) in the plain containers `node`."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        if value == "???":
            yield f"{prefix}{key}"
        yield from _missing_keys(value, f"{prefix}{key}.")


def validate_config(cfg: DictConfig) -> RunConfig:
    """The run's settings from the composed config, read from its record (`composed_record`);
    `cfg` is not changed. Raises ConfigError naming the culprit. The extensions of `imports` are
    imported first: an estimator they register may be named in an interpolation."""
    try:
        import_extensions(list(OmegaConf.select(cfg, "imports", default=None) or []), "imports")
    except (ValueError, OmegaConfBaseException) as e:
        raise ConfigError(str(e)) from None
    composed = composed_record(cfg)
    cfg = OmegaConf.create(composed)
    source = OmegaConf.select(cfg, "teacher.source", default=PATH)
    models = OmegaConf.select(cfg, "distillation.teacher_models", default=None) or {}
    require(
        source not in SELF_SOURCES or not any(entry and entry.get("model_path") for entry in models.values()),
        "distillation.teacher_models",
        f"the teachers are each policy itself with teacher.source={source}; models of their own need "
        f"teacher.source={PATH}",
    )
    teachers = read_teachers(cfg, OmegaConf.select(cfg, "teacher.model_path", default=None))
    try:
        estimator = validate_estimator_config(cfg)
    except (ValueError, OmegaConfBaseException) as e:
        raise ConfigError(str(e)) from None
    correction = verl_algo_config(cfg).rollout_correction

    workflow = _read_section(cfg, "workflow", WorkflowSection)
    rollout = _read_section(cfg, "rollout", RolloutSection)
    students = _read_section(cfg, "students", StudentsSection)
    teacher = _read_section(cfg, "teacher", TeacherSection)
    pac = _read_section(cfg, "pac", PacSection)
    engines = _read_section(cfg, "engines", EnginesSection)
    data = read_fields(cfg, "data", DataSection)
    trainer = read_fields(cfg, "trainer", TrainerSection)
    serving = read_fields(cfg, "actor_rollout_ref.rollout", ServingSection)
    longest = data.max_prompt_length + data.max_response_length
    require(
        engines.max_tokens_per_micro_batch >= longest,
        "engines.max_tokens_per_micro_batch",
        f"{engines.max_tokens_per_micro_batch} tokens cannot hold one sequence of data.max_prompt_length + "
        f"data.max_response_length = {longest} tokens",
    )
    actor = actor_loss(cfg)
    _at_least("actor_rollout_ref.actor.ppo_mini_batch_size", actor.config.ppo_mini_batch_size, 1)
    students = StudentsSection(
        _expand(students.path), {k: _expand(v) for k, v in students.policy_paths.items()}, students.lora
    )
    teacher = replace(
        teacher,
        model_path=_expand(teacher.model_path) if teacher.model_path else None,
        share_prefix=_share_prefix(teacher, trainer.device),
    )

    teachers = replace(teachers, entries=tuple(replace(t, model_path=_expand(t.model_path)) for t in teachers.entries))
    built_workflow, policies = _check_workflow(workflow)
    _check_policy_paths(workflow, students, policies)
    _check_models(students, teacher, teachers)
    require(
        not teachers.several or teacher.backend != LORA_BASE,
        "teacher.backend",
        "lora_base scores with one policy's base model; several teachers need the engine or vllm backend",
    )
    loras = policy_loras(cfg, {p: students.policy_paths.get(p, students.path) for p in policies})
    if serving.name == "vllm":
        _check_vllm_loras(loras)
        require(
            rollout.max_off_policy == 0 or any(loras.values()),
            "rollout.max_off_policy",
            "with full fine-tuning on vllm each policy generates and trains on one hybrid worker (its vLLM "
            "servers sleep through the policy's log-probs and update), so no rollout can play beside the "
            "update; use 0, LoRA policies (actor_rollout_ref.model.lora_rank > 0) or actor_rollout_ref.rollout.name=hf",
        )
    check_actor_settings(cfg, hybrid=serving.name == "vllm" and not any(loras.values()))
    _check_lora_base(teacher, loras, {p: students.policy_paths.get(p, students.path) for p in policies})
    _check_frozen_loras(teacher, loras)
    train_files = _data_files(cfg, "data.train_files", required=True)
    val_files = _data_files(cfg, "data.val_files", required=False)
    _check_loggers(trainer.logger)

    return RunConfig(
        workflow=workflow,
        rollout=rollout,
        students=students,
        teacher=teacher,
        pac=pac,
        engines=engines,
        data=data,
        trainer=trainer,
        serving=serving,
        actor=actor,
        estimator=estimator,
        policies=policies,
        train_files=train_files,
        val_files=val_files,
        train_sampling=_sampling(cfg.actor_rollout_ref.rollout, "actor_rollout_ref.rollout", data.max_response_length),
        val_sampling=_sampling(
            cfg.actor_rollout_ref.rollout.val_kwargs, "actor_rollout_ref.rollout.val_kwargs", data.max_response_length
        ),
        built_workflow=built_workflow,
        loras=loras,
        teachers=teachers,
        rollout_correction=correction,
        composed=composed,
    )


def verl_algo_config(cfg: DictConfig) -> AlgoConfig:
    """verl's `AlgoConfig` from `algorithm` minus the project's estimator sections and `per_role`."""
    algorithm = OmegaConf.to_container(cfg.algorithm, resolve=True)
    project = sorted([*OPTION_SECTIONS, PER_ROLE])
    for section in project:
        algorithm.pop(section, None)
    try:
        return omega_conf_to_dataclass(OmegaConf.create(algorithm), AlgoConfig)
    except ConfigKeyError as e:
        raise ConfigError(
            f"algorithm.{e.full_key}: unknown key (not in verl's AlgoConfig nor one of {project})"
        ) from None


def _read_section(cfg: DictConfig, key: str, schema: type):
    """`cfg[key]` as an instance of the dataclass `schema` (OmegaConf checks keys and types)."""
    node = OmegaConf.select(cfg, key)
    if node is None:
        raise ConfigError(f"{key}: the section is missing")
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), node))
    except ConfigKeyError as e:
        raise ConfigError(f"{key}.{e.full_key}: unknown key") from None
    except MissingMandatoryValue as e:
        raise ConfigError(f"{key}.{e.full_key}: a value is required") from None
    except OmegaConfBaseException as e:
        raise ConfigError(f"{key}.{e.full_key}: {str(e.msg).splitlines()[0]}") from None


def read_fields(cfg: DictConfig, key: str, schema: type):
    """The fields of dataclass `schema` from section `key`, whose other keys belong to verl."""
    node = OmegaConf.select(cfg, key)
    if node is None:
        raise ConfigError(f"{key}: the section is missing")
    names = [f.name for f in fields(schema)]
    missing = [name for name in names if name not in node]
    require(not missing, f"{key}.{missing[0] if missing else ''}", "the key is missing")
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), {name: node[name] for name in names}))
    except MissingMandatoryValue as e:
        raise ConfigError(f"{key}.{e.full_key}: a value is required") from None
    except OmegaConfBaseException as e:
        raise ConfigError(f"{key}.{e.full_key}: {str(e.msg).splitlines()[0]}") from None


def _share_prefix(teacher: TeacherSection, device: str) -> bool:
    """teacher.share_prefix, where null means: on for the engine teacher on CPU, whose sdpa_packed
    attention runs the tree rows (benchmarks/teacher_cost.py: 1.6–2.4× faster than the packed pass on
    the tiny world, 0.96–1.25× with the 10M teacher on paper-style prompts), off elsewhere
    (flash-attention on GPUs cannot run them; the vLLM teacher uses its prefix cache)."""
    if teacher.share_prefix is not None:
        return teacher.share_prefix
    return teacher.backend in ("engine", LORA_BASE) and device == "cpu"


def _expand(path: str) -> str:
    return os.path.abspath(os.path.expanduser(path))


def _check_workflow(workflow: WorkflowSection) -> tuple[Workflow, tuple[str, ...]]:
    """Build the workflow (its own checks name the key); returns it and the policy names."""
    try:
        built = build_workflow(workflow)
    except ValueError as e:
        raise ConfigError(str(e) if str(e).startswith("workflow.") else f"workflow.options: {e}") from None
    return built, tuple(policies_of(built.agents, workflow.policy_sharing))


def _check_policy_paths(workflow: WorkflowSection, students: StudentsSection, policies: tuple[str, ...]) -> None:
    named = sorted(students.policy_paths)
    require(
        workflow.policy_sharing != "shared" or not named,
        "students.policy_paths",
        f"workflow.policy_sharing=shared trains one policy for every agent, but per-policy paths are given "
        f"for {named}; set students.path instead",
    )
    unknown = [name for name in named if name not in policies]
    require(not unknown, "students.policy_paths", f"{unknown} are not policies of this run ({list(policies)})")


def _check_vllm_loras(loras: dict) -> None:
    """On vllm, LoRA policies share a multi-LoRA server per base and full fine-tuning runs a hybrid
    worker per policy: one kind per run; and vLLM's `max_lora_rank` is at most VLLM_MAX_LORA_RANK."""
    with_lora = sorted(p for p, lora in loras.items() if lora is not None)
    without = sorted(p for p, lora in loras.items() if lora is None)
    require(
        not with_lora or not without,
        "students.lora",
        f"with actor_rollout_ref.rollout.name=vllm every policy trains LoRA or none does; {', '.join(with_lora)} "
        f"with LoRA, {', '.join(without)} without",
    )
    for policy in with_lora:
        require(
            loras[policy].rank <= VLLM_MAX_LORA_RANK,
            "actor_rollout_ref.model.lora_rank",
            f"{policy}'s rank {loras[policy].rank} exceeds vLLM's largest max_lora_rank {VLLM_MAX_LORA_RANK}",
        )


def _check_lora_base(teacher: TeacherSection, loras: dict, policy_paths: dict[str, str]) -> None:
    """teacher.backend=lora_base needs a policy with LoRA whose base is teacher.model_path."""
    if teacher.backend != LORA_BASE or not teacher.model_path:
        return
    bases = sorted({policy_paths[p] for p, lora in loras.items() if lora is not None})
    require(
        teacher.model_path in bases,
        "teacher.backend",
        f"lora_base scores with a LoRA policy's base model, adapter off, so it needs a policy with LoRA "
        f"(actor_rollout_ref.model.lora_rank > 0) that starts from teacher.model_path={teacher.model_path}; "
        f"the LoRA policies start from {bases or 'nothing: LoRA is off'}",
    )


def _check_frozen_loras(teacher: TeacherSection, loras: dict) -> None:
    """teacher.source=frozen scores a LoRA policy with its adapter off, which is the policy at step 0
    only when the adapter starts at B = 0, not from a saved adapter (lora_adapter_path)."""
    if teacher.source != FROZEN:
        return
    started = sorted(p for p, lora in loras.items() if lora is not None and lora.adapter_path)
    require(
        not started,
        "actor_rollout_ref.model.lora_adapter_path",
        f"teacher.source=frozen scores a LoRA policy with its adapter off (its step-0 weights when the adapter "
        f"starts at zero), but {', '.join(started)} start from a saved adapter; merge it into the base model "
        f"(python -m verl_masopd.merge_adapter) and start from that folder",
    )


def _check_models(students: StudentsSection, teacher: TeacherSection, teachers: Teachers) -> None:
    folders = {"students.path": students.path}
    folders |= {f"students.policy_paths.{name}": path for name, path in students.policy_paths.items()}
    if teacher.model_path:
        folders["teacher.model_path"] = teacher.model_path
    if teachers.several:
        folders |= {f"distillation.teacher_models.{t.name}.model_path": t.model_path for t in teachers.entries}
    for key, path in folders.items():
        has_model = os.path.isfile(os.path.join(path, "config.json"))
        require(has_model, key, f"no Hugging Face model at {path} (no config.json)")
    check_model_conventions(folders, "teacher.model_path" if teacher.model_path else None)


def _data_files(cfg: DictConfig, key: str, required: bool) -> tuple[str, ...]:
    value = OmegaConf.select(cfg, key, throw_on_missing=False)
    if OmegaConf.is_missing(cfg, key) or value is None:
        require(not required, key, "at least one parquet file is required")
        return ()
    files = (value,) if isinstance(value, str) else tuple(value)
    require(bool(files) or not required, key, "at least one parquet file is required")
    missing = [f for f in files if not os.path.isfile(os.path.expanduser(f))]
    require(not missing, key, f"file(s) not found: {missing}")
    return tuple(_expand(f) for f in files)


def _check_loggers(loggers: tuple[str, ...]) -> None:
    unknown = [name for name in loggers if name not in Tracking.supported_backend]
    require(not unknown, "trainer.logger", f"unknown backend(s) {unknown}; verl supports {Tracking.supported_backend}")


def _sampling(node: DictConfig, key: str, max_new_tokens: int) -> SamplingParams:
    """Sampling settings: temperature >= 0 (0 is greedy), top_p in (0, 1], top_k >= 1 or -1/0 (no top-k)."""
    values = {}
    for name, kind in (("temperature", float), ("top_p", float), ("top_k", int)):
        try:
            values[name] = kind(node[name])
        except (TypeError, ValueError):
            raise ConfigError(f"{key}.{name}: must be a number, got {node[name]!r}") from None
    temperature, top_p, top_k = values["temperature"], values["top_p"], values["top_k"]
    require(math.isfinite(temperature) and temperature >= 0, f"{key}.temperature", f"must be >= 0, got {temperature}")
    require(0 < top_p <= 1, f"{key}.top_p", f"must be in (0, 1], got {top_p}")
    require(top_k >= -1, f"{key}.top_k", f"must be >= 1, or -1 or 0 for no top-k, got {top_k}")
    return SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, max_new_tokens=int(max_new_tokens))
