"""The trainer's parts, built from the validated run config in dependency order.

`build_trainer_parts(run, backend_factory)` builds, each step from what the steps before built:
  1. checkpoints  the checkpoint folder checked and the resume point chosen, before any model loads
  2. generation   the generation path (hf, vllm hybrid, vllm multi-LoRA) from the serving keys and
                  what this machine has (serving/generation_path.py)
  3. data         the workflow, the students' tokenizer, the training stream and the held-out problems
  4. teachers     the run's teachers and the check of their routing (needs 3: the workflow's roles,
                  the problems' data sources), and the teacher models the run loads
  5. placement    where each engine runs (needs 2 and 4: how many engines and vLLM servers)
  6. policies     an engine and a generation backend per policy (needs 5)
  7. scorers      the reference policy, the teacher (its scorers, PAC's attributor), the judge,
                  MARFT's critic (needs 5 and 6: engines of their own, or a policy's)
  8. rollout      the training and evaluation rollout managers over the policies' backends (needs 3, 6)
  9. staleness    the bound and correction of stale rows (rollout.max_off_policy >= 1)
The checks that need only the config run before, in `validate_config` (config/validate.py); the
checks here read the machine, the data files or the model folders.

A teacher's scorer is one of 3 × 3 (`TeacherScorers`): teacher.source (path, frozen, live) ×
teacher.backend (engine, vllm, lora_base).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from verl_masopd.algos.marft_critic import MarftCritic
from verl_masopd.algos.token_classes import TokenClassifier
from verl_masopd.config.run import FROZEN, LIVE, LORA_BASE, REFERENCE, DataSection, RunConfig, build_workflow
from verl_masopd.engine.policy import Policy
from verl_masopd.engine.policy_engine import EngineSettings, PolicyEngine
from verl_masopd.options.errors import ConfigError, require
from verl_masopd.rollout.backend import GenerationBackend
from verl_masopd.rollout.hf_backend import HFBackend
from verl_masopd.rollout.manager import RolloutManager
from verl_masopd.rollout.policies import policy_of
from verl_masopd.serving.adapter_policies import build_adapter_policies
from verl_masopd.serving.generation_path import VLLM, check_teacher_backend, select_generation_path
from verl_masopd.serving.hybrid_policy import build_vllm_policy
from verl_masopd.serving.plans import plan_policy_serving
from verl_masopd.serving.teacher_servers import VllmTeacher
from verl_masopd.teacher.attribution import Attributor
from verl_masopd.teacher.contexts import TeacherContextBuilder
from verl_masopd.teacher.engine_scorer import AdapterOff, EngineTeacherScorer
from verl_masopd.teacher.judging import JudgeScoring
from verl_masopd.teacher.scoring import TeacherScoring
from verl_masopd.teacher.teachers import POLICY, Teacher, Teachers, check_teachers, self_teachers
from verl_masopd.trainer.checkpoint import prepare_checkpoint_folder
from verl_masopd.trainer.data import ProblemStream, read_problems
from verl_masopd.trainer.distillation_loss import DistillationActorLoss
from verl_masopd.trainer.placement import EnginePlacement
from verl_masopd.trainer.staleness import Staleness
from verl_masopd.workflows.base import Workflow

BackendFactory = Callable[[str, str, int], GenerationBackend]


def hf_backend(policy: str, model_path: str, seed: int) -> GenerationBackend:
    return HFBackend(model_path, seed=seed)


@dataclass
class TrainerParts:
    """What the trainer's loop runs on (the module docstring's steps)."""

    resume_point: Path | None  # 1: the checkpoint to continue from, None for a fresh start
    workflow: Workflow  # 3
    tokenizer: PreTrainedTokenizerBase
    pad_id: int
    token_classes: TokenClassifier | None  # per-class diagnostics of compact replies
    stream: ProblemStream
    val_problems: list
    teachers: Teachers  # 4
    placement: EnginePlacement  # 5
    num_mini_batches: int  # optimizer steps per update
    policies: dict[str, Policy]  # 6
    servers: list  # what closing stops: hybrid policies, adapter servers, the teacher's servers
    reference: PolicyEngine | None  # 7
    teacher: TeacherScoring | None
    attributor: Attributor | None
    judge: JudgeScoring | None
    critic: MarftCritic | None
    scores_as_done: bool  # the teacher and the judge score episodes as they finish (`_scores_as_done`)
    manager: RolloutManager  # 8
    val_manager: RolloutManager
    staleness: Staleness | None  # 9


def build_trainer_parts(run: RunConfig, backend_factory: BackendFactory = hf_backend) -> TrainerParts:
    """The parts of the module docstring, in its order; `backend_factory(policy, model_path, seed)`
    makes each policy's generation backend on the hf generation path."""
    estimator = run.estimator
    # 1. the checkpoint folder and the resume point, before any model loads
    resume_point = prepare_checkpoint_folder(run.trainer)
    # 2. the generation path (hf, vllm hybrid, vllm multi-LoRA), from the serving keys and the machine
    generation = select_generation_path(run.serving.name, run.engines.placement, run.trainer.device)
    check_teacher_backend(run.teacher.backend, generation)
    # 3. the workflow, the tokenizer and the problems (the stream is rewound by the trainer's resume)
    workflow = build_workflow(run.workflow)
    tokenizer = AutoTokenizer.from_pretrained(run.students.path)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    # per-class diagnostics for the compact replies of the tiny world (about 0.65 µs a token)
    token_classes = TokenClassifier(tokenizer) if run.workflow.prompt_style == "compact" else None
    domain = run.workflow.domain
    stream = _stream(_problems(run.train_files, domain, "data.train_files"), run.data)
    val_problems = _problems(run.val_files, domain, "data.val_files") if run.val_files else []
    # 4. the teachers and the checks of their routing (needs 3's workflow roles and problems)
    teachers = _teachers(run, workflow)
    if estimator.needs_teacher:
        routing = _routing_values(run, workflow, teachers, stream)
        check_teachers(teachers, routing, estimator.distillation.uses_topk)
    teacher_models = _teacher_models(run, teachers)
    frozen_copies = _frozen_copies(run, teacher_models)
    # 5. where each engine runs (needs 2 and 4: how many engines and servers)
    placement = _placement(run, generation, teacher_models, frozen_copies)
    # optimizer steps per update: the step's problems in mini-batches of actor.ppo_mini_batch_size
    num_mini_batches = max(1, -(-run.data.train_batch_size // run.actor.config.ppo_mini_batch_size))
    # 6. the policies: an engine and a generation backend each (needs 5)
    servers: list = []
    policies = _policies(run, generation, placement, num_mini_batches, backend_factory, servers)
    # 7. the scorers: reference, teacher (with PAC's attributor), judge, MARFT's critic (needs 5 and 6)
    reference = teacher = attributor = judge = critic = None
    if estimator.needs_reference:
        reference = _engine(run, placement, run.policy_path(run.policies[0]), "reference")
    topk = estimator.distillation.topk if estimator.distillation.uses_topk else 0
    scorer_of = TeacherScorers(run, placement, policies, pad_id, frozen_copies, topk, servers)
    scorers = {t.name: scorer_of(t) for t in teacher_models}
    if estimator.needs_teacher:
        teacher, attributor = _teacher_scoring(run, workflow, tokenizer, teachers, list(scorers.values()), topk)
    if estimator.needs_judge:
        judged = [r for r in workflow.roles if estimator.role_estimator(r).settings.spec.needs_judge]
        scorer = scorers[_judge_teacher(run, teachers).name]
        judge = JudgeScoring(workflow, tokenizer, scorer, run.teacher.max_context_length, judged)
    if estimator.needs_critic:
        critic = MarftCritic.from_pretrained(run.students.path, estimator.options, run.trainer.seed)
    scores_as_done = _scores_as_done(run, teacher is not None or judge is not None, teacher_models, frozen_copies)
    # 8. the rollout managers over the policies' backends (needs 3 and 6)
    backends = {name: p.backend for name, p in policies.items()}
    common = dict(
        policy_sharing=run.workflow.policy_sharing,
        max_prompt_len=run.data.max_prompt_length,
        context_layout=run.workflow.context_layout,
        turn_barrier=run.rollout.turn_barrier,
        weight_version=lambda policy: policies[policy].version,
    )
    manager = RolloutManager(workflow, backends, tokenizer, sampling=run.train_sampling, **common)
    val_manager = RolloutManager(workflow, backends, tokenizer, sampling=run.val_sampling, **common)
    # 9. the staleness bound and correction of the rows played beside the update
    bound = run.rollout.max_off_policy
    staleness = Staleness(bound, run.rollout_correction) if bound else None
    return TrainerParts(
        resume_point=resume_point,
        workflow=workflow,
        tokenizer=tokenizer,
        pad_id=pad_id,
        token_classes=token_classes,
        stream=stream,
        val_problems=val_problems,
        teachers=teachers,
        placement=placement,
        num_mini_batches=num_mini_batches,
        policies=policies,
        servers=servers,
        reference=reference,
        teacher=teacher,
        attributor=attributor,
        judge=judge,
        critic=critic,
        scores_as_done=scores_as_done,
        manager=manager,
        val_manager=val_manager,
        staleness=staleness,
    )


def _problems(files: tuple[str, ...], domain: str, key: str) -> list:
    """The problems of `files`; a bad file or row stops the start with a ConfigError naming `key`."""
    try:
        return read_problems(files, domain)
    except (OSError, ValueError) as e:
        raise ConfigError(f"{key}: {e}") from None


def _stream(problems: list, data: DataSection) -> ProblemStream:
    """The training stream; too few problems for one batch stops the start, naming both keys."""
    require(
        len(problems) >= data.train_batch_size,
        "data.train_files",
        f"{len(problems)} problems cannot fill one batch of data.train_batch_size={data.train_batch_size}",
    )
    return ProblemStream(problems, data.train_batch_size, data.seed)


def _scored_roles(run: RunConfig, workflow: Workflow) -> list[str]:
    return [r for r in workflow.roles if run.estimator.role_estimator(r).settings.uses_teacher]


def _teachers(run: RunConfig, workflow: Workflow) -> Teachers:
    """The run's teachers: those of the config (teacher.source=path), or with frozen or live one per
    policy whose rows a teacher scores, the policy itself (teacher/teachers.py, `self_teachers`)."""
    if not run.self_teacher:
        return run.teachers
    scored = set(_scored_roles(run, workflow)) if run.estimator.needs_teacher else set(workflow.roles)
    sharing = run.workflow.policy_sharing
    policies = dict.fromkeys(policy_of(a, sharing) for a in workflow.agents if a.role in scored)
    return self_teachers({p: run.policy_path(p) for p in policies})


def _routing_values(run: RunConfig, workflow: Workflow, teachers: Teachers, stream: ProblemStream) -> set[str]:
    """The values rows are routed to teachers by (distillation.teacher_key): the scored roles,
    or the training problems' data_source; with teacher.source frozen or live the policies."""
    if teachers.route_by == POLICY:
        return {t.key for t in teachers.entries}
    if teachers.route_by == "role":
        return set(_scored_roles(run, workflow))
    return {p.data_source for p in stream.problems}


def _teacher_models(run: RunConfig, teachers: Teachers) -> list[Teacher]:
    """The teachers the run loads: every teacher when an estimator reads the teacher's scores,
    else the judge's one when an estimator reads a judge's; none otherwise."""
    if run.estimator.needs_teacher:
        return list(teachers.entries)
    return [_judge_teacher(run, teachers)] if run.estimator.needs_judge else []


def _judge_teacher(run: RunConfig, teachers: Teachers) -> Teacher:
    """The judge: the teacher of `teacher.model_path` (the first when it names none)."""
    return next((t for t in teachers.entries if t.model_path == run.teacher.model_path), teachers.entries[0])


def _frozen_copies(run: RunConfig, teacher_models: list[Teacher]) -> set[str]:
    """teacher.source=frozen: the starting folders the frozen teacher loads a model of, one each;
    a LoRA policy scored on the engine needs none, its base model with the adapter off being its
    step-0 weights."""
    if run.teacher.source != FROZEN:
        return set()
    adapter_off = run.teacher.backend != VLLM
    return {t.model_path for t in teacher_models if not (adapter_off and run.loras.get(t.key))}


def _placement(
    run: RunConfig, generation: str, teacher_models: list[Teacher], frozen_copies: set[str]
) -> EnginePlacement:
    """Engines: one per policy, per teacher model loaded on the engine backend, and the reference;
    servers: the teacher's vLLM ones and, on vllm, one multi-LoRA server per base model."""
    # the teacher models loaded: each teacher's (path), one frozen copy per starting folder (frozen)
    loaded = len(frozen_copies) if run.self_teacher else len(teacher_models)
    teacher_engines = loaded * (run.teacher.backend == "engine")
    engines = len(run.policies) + teacher_engines + int(run.estimator.needs_reference)
    num_cpus = None
    if run.hybrid and run.trainer.device == "cpu":
        # each policy is a worker group with a pool of its own, the other engines share one:
        # one Ray slot (not a core) per policy and per shared engine
        engines -= len(run.policies)
        num_cpus = len(run.policies) + max(engines, 1)
    # standalone vLLM servers: the teacher's, and one per base model of the LoRA policies
    # (on vllm, LoRA policies share one multi-LoRA server per base, serving/adapter_policies.py;
    # full fine-tuning runs a hybrid worker per policy, serving/hybrid_policy.py)
    standalone = loaded * (run.teacher.backend == VLLM)
    if generation == VLLM and any(run.loras.values()):
        standalone += len({run.policy_path(p) for p in run.policies})
    server_gpus = run.serving.world_size * standalone
    return EnginePlacement(run.engines, engines, num_cpus, server_gpus)


def _policies(
    run: RunConfig,
    generation: str,
    placement: EnginePlacement,
    num_mini_batches: int,
    backend_factory: BackendFactory,
    servers: list,
) -> dict[str, Policy]:
    """One engine + generation backend per policy; the estimator's loss (actor config). The hybrid
    policies and the adapter servers join `servers`."""
    loss_fn = actor = run.actor
    if run.estimator.distillation.in_engine:
        loss_fn = DistillationActorLoss(actor.config, run.estimator.distillation)
    grad_clip = run.estimator.actor_grad_clip(actor.config.grad_clip)
    settings = {
        name: EngineSettings(
            model_path=run.policy_path(name),
            lr=actor.config.optim.lr,
            weight_decay=actor.config.optim.weight_decay,
            grad_clip=grad_clip,
            dtype=run.engines.dtype,
            max_tokens_per_micro_batch=run.engines.max_tokens_per_micro_batch,
            seed=run.trainer.seed + i,
            lora=run.loras.get(name),
        )
        for i, name in enumerate(run.policies)
    }
    if run.hybrid:
        gpus = run.engines.gpus_per_engine
        policies = {
            name: build_vllm_policy(
                plan_policy_serving(run.composed, run.serving, run.trainer, gpus, name, i, s),
                s,
                loss_fn,
                num_mini_batches,
            )
            for i, (name, s) in enumerate(settings.items())
        }
        servers += policies.values()
        return policies
    if generation == VLLM:
        engines = {name: placement.build(s, name) for name, s in settings.items()}
        policies, adapter_servers = build_adapter_policies(run, settings, engines, loss_fn, num_mini_batches)
        servers += adapter_servers
        return policies
    policies = {}
    for name, s in settings.items():
        engine = placement.build(s, name)
        policies[name] = Policy(name, engine, backend_factory(name, s.model_path, s.seed), loss_fn, num_mini_batches)
    return policies


def _engine(run: RunConfig, placement: EnginePlacement, model_path: str, name: str) -> PolicyEngine:
    """A forward-only engine (the teacher, the reference policy)."""
    tokens = max(run.engines.max_tokens_per_micro_batch, run.teacher.max_context_length)
    settings = EngineSettings(
        model_path=model_path, forward_only=True, dtype=run.engines.dtype, max_tokens_per_micro_batch=tokens
    )
    return placement.build(settings, name)


@dataclass
class TeacherScorers:
    """Each teacher model's scorer, by teacher.source and teacher.backend:
    path     a model of its own (`teacher.model_path`): vLLM servers (vllm), a forward-only engine
             (engine), or with lora_base the base model of the LoRA policy that starts from it
             (`RunConfig.teacher_policy`), scored on its engine with the adapter off;
    live     the policy's own engine, whose weights are the policy's now (before this step's update;
             adapter on); a hybrid vLLM worker scores through its log-prob pass, no shared prefixes;
    frozen   a LoRA policy's engine with the adapter off (B = 0 at step 0, so the base is the initial
             policy); else a frozen copy of the starting folder on the teacher backend (a forward-only
             engine or vLLM servers), one per folder, shared by the policies that start from it.
    The vLLM servers it starts join `servers`."""

    run: RunConfig
    placement: EnginePlacement
    policies: dict[str, Policy]
    pad_id: int
    frozen_copies: set[str]
    topk: int
    servers: list
    frozen: dict = field(default_factory=dict)  # starting folder → the frozen copy's scorer

    def __call__(self, teacher: Teacher):
        if self.run.self_teacher:
            return self._self_scorer(teacher)
        if self.run.teacher.backend == LORA_BASE:
            engine = AdapterOff(self.policies[self.run.teacher_policy()].engine)
            return EngineTeacherScorer(engine, self.pad_id, share_prefix=self.run.teacher.share_prefix)
        return self._model_scorer(teacher, "teacher" if not self.run.teachers.several else teacher.name)

    def _model_scorer(self, teacher: Teacher, name: str):
        """A scorer over a model of its own: vLLM servers named `teacher_{name}` (`teacher` for the
        one teacher) or a forward-only engine named `name`."""
        run = self.run
        if run.teacher.backend == VLLM:
            servers_name = "teacher" if name == "teacher" else f"teacher_{name}"
            servers = VllmTeacher(
                run.composed,
                run.serving,
                run.trainer.device,
                teacher.model_path,
                run.engines.dtype,
                servers_name,
                self.topk,
            )
            self.servers.append(servers)
            return servers.scorer
        engine = _engine(run, self.placement, teacher.model_path, name)
        return EngineTeacherScorer(engine, self.pad_id, share_prefix=run.teacher.share_prefix)

    def _self_scorer(self, teacher: Teacher):
        """Self-distillation's scorer of policy `teacher.key` (live or frozen)."""
        engine = self.policies[teacher.key].engine
        share = self.run.teacher.share_prefix
        if self.run.teacher.source == LIVE:
            return EngineTeacherScorer(engine, self.pad_id, share_prefix=share and not self.run.hybrid)
        if teacher.model_path not in self.frozen_copies:
            return EngineTeacherScorer(AdapterOff(engine), self.pad_id, share_prefix=share)
        if teacher.model_path not in self.frozen:
            self.frozen[teacher.model_path] = self._model_scorer(teacher, f"frozen_{teacher.key}")
        return self.frozen[teacher.model_path]


def _teacher_scoring(
    run: RunConfig, workflow: Workflow, tokenizer, teachers: Teachers, scorers: list, topk: int
) -> tuple[TeacherScoring, Attributor | None]:
    """Teacher scoring under RAS role conditions, and the PAC attribution route."""
    builder = TeacherContextBuilder(
        workflow,
        tokenizer,
        run.teacher.max_context_length,
        run.pac.reveal_reference,
        layout=run.workflow.context_layout,
        reference=run.teacher.privileged == REFERENCE,
    )
    scoring = TeacherScoring(
        builder,
        scorers,
        run.estimator.num_contrast_roles,
        run.pac.enable,
        _scored_roles(run, workflow),
        topk=topk,
        teachers=teachers,
    )
    if not run.pac.enable:
        return scoring, None
    # the attribution model: the teacher model, or with teacher.source frozen or live the students'
    # starting model
    model = run.teacher.model_path or run.students.path
    judge = HFBackend(model) if run.pac.attribution == "model" else None
    return scoring, Attributor(workflow, run.pac.attribution, judge, tokenizer)


def _scores_as_done(run: RunConfig, scores: bool, teacher_models: list[Teacher], frozen_copies: set[str]) -> bool:
    """Whether the teacher and the judge (`scores`: either runs) score episodes as they finish
    (teacher/overlap.py): without the turn barrier, unless they run on a policy's training engine
    (lora_base, a live teacher, a frozen one that is a LoRA policy's base model), which a hybrid
    vLLM rollout shares its GPU with."""
    source = run.teacher.source
    on_policy_engine = (
        run.teacher.backend == LORA_BASE
        or source == LIVE
        or (source == FROZEN and any(t.model_path not in frozen_copies for t in teacher_models))
    )
    return scores and not run.rollout.turn_barrier and not on_policy_engine
