"""Start-up validation of the composed config, read into small dataclasses.

`validate_config(cfg)` runs once before anything starts and raises `ConfigError` naming the
culprit key(s):
  1. the estimator against the rest (`verl_masopd.algos.specs.validate_estimator_config`) and
     every estimator option section under `algorithm` (unknown keys, bad values), read once into
     the typed `EstimatorSettings` the trainer hands down;
  2. each project section (workflow, rollout, students, teacher, pac) merged into its schema
     below: an unknown key, a missing value or a wrong type is named with its full key;
  3. the rules that span sections (`_check_*`): the workflow builds, per-policy starting points
     name real policies and are not combined with one shared policy, model folders and data
     files exist, teacher and students share a tokenizer, logging backends exist.
verl's own sections are validated by verl's dataclasses when the trainer converts them;
`verl_algo_config` converts `algorithm` without the project's estimator sections, which verl's
structured `AlgoConfig` would reject.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, MissingMandatoryValue, OmegaConfBaseException
from transformers import AutoTokenizer
from verl.trainer.config import AlgoConfig
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.tracking import Tracking

from verl_masopd.algos.specs import OPTION_SECTIONS, EstimatorSettings, validate_estimator_config
from verl_masopd.config_errors import ConfigError, require
from verl_masopd.context import LAYOUTS
from verl_masopd.extensions import import_extensions
from verl_masopd.rollout.backend import SamplingParams
from verl_masopd.rollout.policies import SHARINGS, policies_of
from verl_masopd.workflows import make_workflow
from verl_masopd.workflows.base import Workflow
from verl_masopd.workflows.prompted import PROMPT_STYLES

PAC_ATTRIBUTIONS = ("rules", "model")
TEACHER_BACKENDS = ("engine", "vllm")


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
    context_layout: str = "role_first"
    prompt_style: str = "paper"
    options: dict[str, Any] = field(default_factory=dict)

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

    def __post_init__(self):
        _at_least("rollout.group_size", self.group_size, 1)
        require(
            not self.tree_sampling or self.group_size >= 2,
            "rollout.group_size",
            f"tree sampling needs at least 2 branches per problem, got {self.group_size}",
        )


@dataclass
class StudentsSection:
    path: str
    policy_paths: dict[str, str] = field(default_factory=dict)


@dataclass
class TeacherSection:
    model_path: Optional[str]
    max_context_length: int
    share_prefix: Optional[bool] = None
    backend: str = "engine"

    def __post_init__(self):
        _at_least("teacher.max_context_length", self.max_context_length, 2)
        _one_of("teacher.backend", self.backend, TEACHER_BACKENDS)
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


@dataclass(frozen=True)
class RunConfig:
    """The validated project settings; verl's sections stay in the composed config."""

    workflow: WorkflowSection
    rollout: RolloutSection
    students: StudentsSection
    teacher: TeacherSection
    pac: PacSection
    estimator: EstimatorSettings
    policies: tuple[str, ...]
    train_files: tuple[str, ...]
    val_files: tuple[str, ...]
    train_sampling: SamplingParams
    val_sampling: SamplingParams

    def policy_path(self, policy: str) -> str:
        """The folder policy `policy` starts from: its own entry in students.policy_paths, else students.path."""
        return self.students.policy_paths.get(policy, self.students.path)

    def make_workflow(self) -> Workflow:
        return build_workflow(self.workflow)


def build_workflow(w: WorkflowSection) -> Workflow:
    """The workflow the section describes, with the execution timeout of its domain."""
    timeout = getattr(w.exec_timeout_s, w.domain)
    return make_workflow(
        w.name, w.domain, w.agents_per_role, w.horizon, timeout=timeout, prompt_style=w.prompt_style, **w.options
    )


def validate_config(cfg: DictConfig) -> RunConfig:
    """The run's settings from the composed config; raises ConfigError naming the culprit."""
    try:
        import_extensions(list(cfg.get("imports") or []), "imports")
        estimator = validate_estimator_config(cfg)
    except (ValueError, OmegaConfBaseException) as e:
        raise ConfigError(str(e)) from None
    verl_algo_config(cfg)

    workflow = _read_section(cfg, "workflow", WorkflowSection)
    rollout = _read_section(cfg, "rollout", RolloutSection)
    students = _read_section(cfg, "students", StudentsSection)
    teacher = _read_section(cfg, "teacher", TeacherSection)
    pac = _read_section(cfg, "pac", PacSection)
    students = StudentsSection(_expand(students.path), {k: _expand(v) for k, v in students.policy_paths.items()})
    teacher = replace(
        teacher,
        model_path=_expand(teacher.model_path) if teacher.model_path else None,
        share_prefix=_share_prefix(teacher, cfg.trainer.device),
    )

    policies = _check_workflow(workflow)
    _check_policy_paths(workflow, students, policies)
    _check_models(students, teacher)
    train_files = _data_files(cfg, "data.train_files", required=True)
    val_files = _data_files(cfg, "data.val_files", required=False)
    _check_loggers(cfg)

    return RunConfig(
        workflow=workflow,
        rollout=rollout,
        students=students,
        teacher=teacher,
        pac=pac,
        estimator=estimator,
        policies=policies,
        train_files=train_files,
        val_files=val_files,
        train_sampling=_sampling(cfg.actor_rollout_ref.rollout, cfg.data.max_response_length),
        val_sampling=_sampling(cfg.actor_rollout_ref.rollout.val_kwargs, cfg.data.max_response_length),
    )


def verl_algo_config(cfg: DictConfig) -> AlgoConfig:
    """verl's `AlgoConfig` from `algorithm` minus the project's estimator sections."""
    algorithm = OmegaConf.to_container(cfg.algorithm, resolve=True)
    for section in OPTION_SECTIONS:
        algorithm.pop(section, None)
    try:
        return omega_conf_to_dataclass(OmegaConf.create(algorithm), AlgoConfig)
    except ConfigKeyError as e:
        known = sorted(OPTION_SECTIONS)
        raise ConfigError(
            f"algorithm.{e.full_key}: unknown key (not in verl's AlgoConfig nor one of {known})"
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


def _share_prefix(teacher: TeacherSection, device: str) -> bool:
    """teacher.share_prefix, where null means: on for the engine teacher on CPU, whose sdpa_packed
    attention runs the tree rows (benchmarks/teacher_cost.py: 1.6–2.4× faster than the packed pass on
    the tiny world, 0.96–1.25× with the 10M teacher on paper-style prompts), off elsewhere
    (flash-attention on GPUs cannot run them; the vLLM teacher uses its prefix cache)."""
    if teacher.share_prefix is not None:
        return teacher.share_prefix
    return teacher.backend == "engine" and device == "cpu"


def _expand(path: str) -> str:
    return os.path.abspath(os.path.expanduser(path))


def _check_workflow(workflow: WorkflowSection) -> tuple[str, ...]:
    """Build the workflow once (its own checks name the key); returns the policy names."""
    try:
        built = build_workflow(workflow)
    except ValueError as e:
        raise ConfigError(str(e) if str(e).startswith("workflow.") else f"workflow.options: {e}") from None
    return tuple(policies_of(built.agents, workflow.policy_sharing))


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


def _check_models(students: StudentsSection, teacher: TeacherSection) -> None:
    folders = {"students.path": students.path}
    folders |= {f"students.policy_paths.{name}": path for name, path in students.policy_paths.items()}
    if teacher.model_path:
        folders["teacher.model_path"] = teacher.model_path
    for key, path in folders.items():
        has_model = os.path.isfile(os.path.join(path, "config.json"))
        require(has_model, key, f"no Hugging Face model at {path} (no config.json)")
    if teacher.model_path:
        teacher_vocab = _vocabulary(teacher.model_path)
        for key, path in folders.items():
            require(
                key == "teacher.model_path" or _vocabulary(path) == teacher_vocab,
                key,
                f"the tokenizer at {path} differs from the teacher's ({teacher.model_path}); "
                "teacher log-probs are scored on the students' token ids, so both must share one tokenizer",
            )


def _vocabulary(path: str) -> dict[str, int]:
    return AutoTokenizer.from_pretrained(path).get_vocab()


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


def _check_loggers(cfg: DictConfig) -> None:
    loggers = cfg.trainer.logger
    loggers = [loggers] if isinstance(loggers, str) else list(loggers)
    unknown = [name for name in loggers if name not in Tracking.supported_backend]
    require(not unknown, "trainer.logger", f"unknown backend(s) {unknown}; verl supports {Tracking.supported_backend}")


def _sampling(node: DictConfig, max_new_tokens: int) -> SamplingParams:
    return SamplingParams(
        temperature=float(node.temperature),
        top_p=float(node.top_p),
        top_k=int(node.top_k),
        max_new_tokens=int(max_new_tokens),
    )
