"""Start-up validation of the composed config, read into the dataclasses of config/run.py.

`validate_config(cfg)` runs once before anything starts and raises `ConfigError` naming the
culprit key(s):
  1. the estimator against the rest (config/estimator.py), the per-role estimators of
     `algorithm.per_role` likewise, and every estimator option section under `algorithm`
     (unknown keys, bad values), read once into the typed `EstimatorSettings` the trainer hands
     down;
  2. each project section (workflow, rollout, students, teacher, pac) merged into its schema
     (config/run.py): an unknown key, a missing value or a wrong type is named with its full key;
  3. the rules that span sections (`_check_*`): the workflow builds, per-policy starting points
     name real policies and are not combined with one shared policy, model folders and data
     files exist, teacher and students share a tokenizer, logging backends exist, the LoRA
     adapters (config/lora.py) suit the generation path and the teacher.
verl's own sections are validated by verl's dataclasses: `actor_rollout_ref.actor` is converted
here, once, to verl's `FSDPActorConfig` (config/actor_loss.py) and its settings the trainer would
ignore are refused; `verl_algo_config` converts `algorithm` without the project's estimator
sections and `per_role`, which verl's structured `AlgoConfig` would reject.

The composed config is read here and by the readers this module calls (config/estimator.py,
config/actor_loss.py, config/lora.py, config/teachers.py, config/distillation.py), before any engine or server starts:
the trainer and everything it builds take the `RunConfig` (or the part they need), whose
`composed` record is what checkpoints save and hash.
"""

from __future__ import annotations

import math
import os
from dataclasses import fields, replace

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import (
    ConfigKeyError,
    InterpolationResolutionError,
    InterpolationToMissingValueError,
    MissingMandatoryValue,
    OmegaConfBaseException,
)
from verl.trainer.config import AlgoConfig
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.tracking import Tracking

from verl_masopd.algos.per_role import PER_ROLE
from verl_masopd.algos.specs import OPTION_SECTIONS, SELF_SOURCES, EstimatorSettings
from verl_masopd.cli.extensions import import_extensions
from verl_masopd.config.actor_loss import actor_loss, check_actor_settings
from verl_masopd.config.estimator import validate_estimator_config
from verl_masopd.config.lora import policy_loras
from verl_masopd.config.model_conventions import check_model_conventions
from verl_masopd.config.run import (
    FROZEN,
    LIVE,
    LORA_BASE,
    PATH,
    DataSection,
    EnginesSection,
    PacSection,
    RolloutSection,
    RunConfig,
    ServingSection,
    StudentsSection,
    TeacherSection,
    TrainerSection,
    WorkflowSection,
    build_workflow,
)
from verl_masopd.config.teachers import read_teachers
from verl_masopd.options.errors import ConfigError, require
from verl_masopd.rollout.backend import SamplingParams
from verl_masopd.rollout.policies import policies_of
from verl_masopd.teacher.teachers import Teachers

VLLM_MAX_LORA_RANK = 512  # the largest of vLLM's allowed `max_lora_rank` values (vllm.config.lora.MaxLoRARanks)


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
    mini_batch = actor.config.ppo_mini_batch_size
    require(mini_batch >= 1, "actor_rollout_ref.actor.ppo_mini_batch_size", f"must be >= 1, got {mini_batch}")
    students = StudentsSection(
        _expand(students.path), {k: _expand(v) for k, v in students.policy_paths.items()}, students.lora
    )
    teacher = replace(
        teacher,
        model_path=_expand(teacher.model_path) if teacher.model_path else None,
        share_prefix=_share_prefix(teacher, trainer.device),
    )

    teachers = replace(teachers, entries=tuple(replace(t, model_path=_expand(t.model_path)) for t in teachers.entries))
    policies = _check_workflow(workflow)
    _check_policy_paths(workflow, students, policies)
    _check_models(students, teacher, teachers)
    require(
        not teachers.several or teacher.backend != LORA_BASE,
        "teacher.backend",
        "lora_base scores with one policy's base model; several teachers need the engine or vllm backend",
    )
    loras = policy_loras(cfg, {p: students.policy_paths.get(p, students.path) for p in policies})
    _check_vllm(serving, rollout, teacher, estimator, loras)
    check_actor_settings(cfg, hybrid=serving.name == "vllm" and not any(loras.values()))
    _check_lora_base(teacher, loras, {p: students.policy_paths.get(p, students.path) for p in policies})
    _check_frozen_loras(teacher, loras)
    train_files = _data_files(cfg, "data.train_files", required=True)
    val_files = _data_files(cfg, "data.val_files", required=False)
    _check_loggers(trainer.logger)
    train_sampling = _sampling(cfg.actor_rollout_ref.rollout, "actor_rollout_ref.rollout", data.max_response_length)
    require(
        rollout.max_off_policy == 0 or not train_sampling.truncates,
        "rollout.max_off_policy",
        f"rollouts beside the update need untruncated sampling (actor_rollout_ref.rollout.top_p=1, top_k=-1; got "
        f"top_p={train_sampling.top_p}, top_k={train_sampling.top_k}): the backends record the log-probs of the "
        "truncated distribution they sampled from, which the engine's log-probs cannot reproduce, so the importance "
        "weights of stale rows would be wrong; use 0 or untruncated sampling",
    )

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
        train_sampling=train_sampling,
        val_sampling=_sampling(
            cfg.actor_rollout_ref.rollout.val_kwargs, "actor_rollout_ref.rollout.val_kwargs", data.max_response_length
        ),
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


def _check_workflow(workflow: WorkflowSection) -> tuple[str, ...]:
    """Build the workflow (its own checks name the key); returns the policy names."""
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


def _check_vllm(
    serving: ServingSection, rollout: RolloutSection, teacher: TeacherSection, estimator: EstimatorSettings, loras: dict
) -> None:
    """On vllm, LoRA policies share a multi-LoRA server per base and full fine-tuning runs a hybrid
    worker per policy: one kind per run, and vLLM's `max_lora_rank` is at most VLLM_MAX_LORA_RANK. A
    hybrid worker plays no rollout beside the update and has no packed forward for a live teacher's
    top-k rows."""
    if serving.name != "vllm":
        return
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
    if with_lora:
        return
    require(
        rollout.max_off_policy == 0,
        "rollout.max_off_policy",
        "with full fine-tuning on vllm each policy generates and trains on one hybrid worker (its vLLM "
        "servers sleep through the policy's log-probs and update), so no rollout can play beside the "
        "update; use 0, LoRA policies (actor_rollout_ref.model.lora_rank > 0) or actor_rollout_ref.rollout.name=hf",
    )
    scored = estimator.needs_teacher or estimator.needs_judge  # a teacher model scores
    require(
        not (teacher.source == LIVE and estimator.distillation.uses_topk and scored),
        "teacher.source",
        "live with a top-k distillation mode needs the policy engine's packed forward, which the vllm "
        "path's hybrid workers do not have; use actor_rollout_ref.rollout.name=hf, LoRA, or a frozen teacher",
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
