"""The validated settings of a run: the project's config sections as dataclasses and `RunConfig`,
the record the trainer and everything it builds take.

Each section's dataclass checks its own keys' values in `__post_init__` and raises `ConfigError`
naming the key; `config/validate.py` reads the composed config into them and checks the rules
that span sections. `RunConfig` holds settings only (plain values and verl's config dataclasses),
never a built object: `build_workflow` builds the workflow a `WorkflowSection` describes, once for
the validation's checks and once where the trainer builds its parts (trainer/build.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

from verl.trainer.config.algorithm import RolloutCorrectionConfig

from verl_masopd.algos.specs import SELF_SOURCES, EstimatorSettings
from verl_masopd.config.actor_loss import ActorLoss
from verl_masopd.engine.policy_engine import Lora
from verl_masopd.options.errors import require
from verl_masopd.rollout.backend import SamplingParams
from verl_masopd.rollout.policies import SHARINGS
from verl_masopd.teacher.teachers import Teachers
from verl_masopd.tokens.context import LAYOUTS
from verl_masopd.workflows import make_workflow
from verl_masopd.workflows.base import Workflow
from verl_masopd.workflows.prompted import PROMPT_STYLES

PAC_ATTRIBUTIONS = ("rules", "model")
PLACEMENTS = ("ray", "local")
ENGINE_DTYPES = ("float32", "bfloat16")
DEVICES = ("cpu", "cuda", "npu")
RESUME_MODES = ("auto", "disable", "resume_path")  # trainer.resume_mode (trainer/checkpoint.py)
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
    lora: dict[str, dict]  # read by config/lora.py


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
    loras: dict[str, Lora | None] = field(default_factory=dict)  # each policy's adapter (config/lora.py)
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
