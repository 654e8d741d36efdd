"""The training loop: independent per-role policies on verl's engine, end to end.

One step (docs/design.md, "One training step"):
  1. rollout     the rollout manager plays G episodes per problem with every policy's generation
                 backend (AT-GRPO: tree sampling with K = G branches): the step's records
  2. teacher     role-conditioned teacher scores of the records under every role condition, with
                 the PAC block after a conflict (masopd, opd), written into the samples; the
                 teacher as a judge of the replies of the roles trained on its score (judge_grpo,
                 teacher/judging.py)
  3. batch       the records flattened once into one joint DataProto (rollout/batch.py)
  4. log-probs   ℓS from each policy's engine (old_log_probs) with the policy's entropy at each
                 response position; the reference policy's (cure); the centralised critic's values
                 of every observation (marft)
  5. advantage   the diagnostics' token classes (compact prompts: batch["token_class"], algos/token_classes.py) and
                 actor/<role>/entropy; algos.compute_advantages for algorithm.adv_estimator (its
                 spec's steps; rows it drops are marked batch["trainable"] = false), with the
                 advantage diagnostics (algos/diagnostics.py); neither reaches the loss
  6. update      one verl engine update per policy on its own rows (and the critic head)
  7. sync        each policy's new weights pushed to its generation backend
With rollout.max_off_policy = k >= 1 (the hf path, and vllm with LoRA policies) the rollouts of
the coming steps play in a background thread while the trainer goes through 2-7
(trainer/background_rollout.py), each policy synced as soon as its own update ends; before the
update the rows are bounded and corrected per policy (trainer/staleness.py).
Validation every `trainer.test_freq` steps with the evaluation sampling; atomic checkpoints every
`trainer.save_freq` steps; `trainer.resume_mode=auto` continues from the newest checkpoint.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer
from verl import DataProto

from verl_masopd.algos import compute_advantages
from verl_masopd.algos.diagnostics import entropy_metrics
from verl_masopd.algos.marft_critic import MarftCritic
from verl_masopd.algos.token_classes import TokenClassifier
from verl_masopd.config_errors import require
from verl_masopd.engine.policy import Policy
from verl_masopd.engine.policy_engine import EngineSettings, PolicyEngine
from verl_masopd.rollout.backend import GenerationBackend
from verl_masopd.rollout.batch import to_dataproto
from verl_masopd.rollout.evaluation import evaluate
from verl_masopd.rollout.hf_backend import HFBackend
from verl_masopd.rollout.manager import RolloutManager
from verl_masopd.rollout.policies import policy_of
from verl_masopd.rollout.records import RolloutGroup, episodes_of
from verl_masopd.rollout.summary import summarize
from verl_masopd.rollout.tree import TreeSampler
from verl_masopd.serving.adapter_policies import build_adapter_policies
from verl_masopd.serving.generation_path import VLLM, check_teacher_backend, select_generation_path
from verl_masopd.serving.hybrid_policy import build_vllm_policy
from verl_masopd.serving.plans import PolicyServing, plan_policy_serving
from verl_masopd.serving.teacher_servers import VllmTeacher
from verl_masopd.teacher.attribution import Attributions, Attributor
from verl_masopd.teacher.contexts import TeacherContextBuilder
from verl_masopd.teacher.engine_scorer import AdapterOff, EngineTeacherScorer
from verl_masopd.teacher.judging import JudgeScoring
from verl_masopd.teacher.metrics import step_metrics
from verl_masopd.teacher.overlap import Scored, ScoringAsDone
from verl_masopd.teacher.scoring import ScoringStats, TeacherScoring
from verl_masopd.teacher.teachers import POLICY, Teacher, Teachers, check_teachers, self_teachers
from verl_masopd.trainer.background_rollout import BackgroundRollout, Rollout
from verl_masopd.trainer.checkpoint import (
    TrainerState,
    config_hash,
    load_checkpoint,
    prepare_checkpoint_folder,
    save_checkpoint,
)
from verl_masopd.trainer.config import (
    FROZEN,
    LIVE,
    LORA_BASE,
    REFERENCE,
    ConfigError,
    DataSection,
    RunConfig,
)
from verl_masopd.trainer.data import ProblemStream, read_problems
from verl_masopd.trainer.distillation_loss import DistillationActorLoss
from verl_masopd.trainer.placement import EnginePlacement
from verl_masopd.trainer.staleness import Staleness
from verl_masopd.trainer.tracking import open_tracking

logger = logging.getLogger(__name__)

CRITIC_FILE = "critic.pt"


BackendFactory = Callable[[str, str, int], GenerationBackend]


def hf_backend(policy: str, model_path: str, seed: int) -> GenerationBackend:
    return HFBackend(model_path, seed=seed)


class Trainer:
    """Builds every part from the run config (`validate_config` of the composed config) and runs `fit`.

    `backend_factory(policy, model_path, seed)` makes each policy's generation backend on the
    hf generation path (default: the HF backend); on the vllm path (serving/generation_path.py)
    each policy is verl's hybrid actor with its own vLLM servers (serving/hybrid_policy.py).
    """

    def __init__(self, run: RunConfig, backend_factory: BackendFactory = hf_backend):
        """The trainer's parts, built in dependency order; each step names what it needs from before."""
        self.run = run
        # 1. the checkpoint folder and the resume point, before any model loads
        self.resume_point = prepare_checkpoint_folder(run.trainer)
        # 2. the generation path (hf, vllm hybrid, vllm multi-LoRA), from the serving keys alone
        self._setup_generation()
        # 3. the tokenizer and the problems (the stream is rewound by `_resume`)
        self._setup_data()
        # 4. the teachers and the checks of their routing (needs 3's workflow roles)
        self._setup_teachers()
        # 5. where each engine runs (needs 2 and 4: how many engines and servers)
        self._setup_placement()
        # 6. the policies: an engine and a generation backend each (needs 5)
        self.servers: list = []  # what `close` stops: hybrid policies, adapter servers, the teacher's servers
        self.policies = self._build_policies(backend_factory)
        # 7. the scorers: reference, teacher (with PAC's attributor), judge, MARFT's critic (needs 5 and 6)
        self._setup_scorers()
        # 8. the rollout managers over the policies' backends (needs 3 and 6)
        self._setup_rollout()
        # 9. the step counter, the staleness bound and the data position a checkpoint records
        self.checkpoint_root = Path(self.run.trainer.default_local_dir).expanduser()
        self.step = 0
        bound = self.run.rollout.max_off_policy
        self.staleness = Staleness(bound, self.run.rollout_correction) if bound else None
        self.background: BackgroundRollout | None = None  # started by the first step that needs it
        self.data_position = self.stream.state_dict()  # after the problems of the last rollout trained

    def _setup_generation(self) -> None:
        self.generation = select_generation_path(
            self.run.serving.name, self.run.engines.placement, self.run.trainer.device
        )
        self.hybrid = self.run.hybrid
        check_teacher_backend(self.run.teacher.backend, self.generation)
        self.estimator = self.run.estimator
        self.workflow = self.run.built_workflow

    def _setup_data(self) -> None:
        self.tokenizer = AutoTokenizer.from_pretrained(self.run.students.path)
        self.pad_id = (
            self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        )
        # per-class diagnostics for the compact replies of the tiny world (about 0.65 µs a token)
        compact = self.run.workflow.prompt_style == "compact"
        self.token_classes = TokenClassifier(self.tokenizer) if compact else None
        domain = self.run.workflow.domain
        self.stream = _stream(_problems(self.run.train_files, domain, "data.train_files"), self.run.data)
        self.val_problems = _problems(self.run.val_files, domain, "data.val_files") if self.run.val_files else []

    def _setup_teachers(self) -> None:
        self.teachers = self._teachers()
        if self.estimator.needs_teacher:
            check_teachers(self.teachers, self._routing_values(), self.estimator.distillation.uses_topk)
        self.teacher_models = self._teacher_models()

    def _setup_placement(self) -> None:
        """Engines: one per policy, per teacher model loaded on the engine backend, and the reference;
        servers: the teacher's vLLM ones and, on vllm, one multi-LoRA server per base model."""
        # the teacher models loaded: each teacher's (path), one frozen copy per starting folder (frozen)
        loaded = len(self._frozen_copies()) if self.run.self_teacher else len(self.teacher_models)
        teacher_engines = loaded * (self.run.teacher.backend == "engine")
        engines = len(self.run.policies) + teacher_engines + int(self.estimator.needs_reference)
        num_cpus = None
        if self.hybrid and self.run.trainer.device == "cpu":
            # each policy is a worker group with a pool of its own, the other engines share one:
            # one Ray slot (not a core) per policy and per shared engine
            engines -= len(self.run.policies)
            num_cpus = len(self.run.policies) + max(engines, 1)
        # standalone vLLM servers: the teacher's, and one per base model of the LoRA policies
        # (on vllm, LoRA policies share one multi-LoRA server per base, serving/adapter_policies.py;
        # full fine-tuning runs a hybrid worker per policy, serving/hybrid_policy.py)
        standalone = loaded * (self.run.teacher.backend == VLLM)
        if self.generation == VLLM and any(self.run.loras.values()):
            standalone += len({self.run.policy_path(p) for p in self.run.policies})
        server_gpus = self.run.serving.world_size * standalone
        self.placement = EnginePlacement(self.run.engines, engines, num_cpus, server_gpus)
        # optimizer steps per update: the step's problems in mini-batches of actor.ppo_mini_batch_size
        self.num_mini_batches = max(1, -(-self.run.data.train_batch_size // self.run.actor.config.ppo_mini_batch_size))

    def _setup_scorers(self) -> None:
        self.reference = self.teacher = self.attributor = self.judge = self.critic = None
        if self.estimator.needs_reference:
            self.reference = self._engine(self.run.policy_path(self.run.policies[0]), "reference")
        topk = self.estimator.distillation.topk if self.estimator.distillation.uses_topk else 0
        frozen: dict[str, object] = {}  # starting folder → the frozen copy's scorer, shared by its policies
        scorers = {t.name: self._teacher_scorer(t, topk, frozen) for t in self.teacher_models}
        if self.estimator.needs_teacher:
            self.teacher, self.attributor = self._build_teacher(list(scorers.values()), topk)
        if self.estimator.needs_judge:
            judged = [r for r in self.workflow.roles if self.estimator.role_estimator(r).settings.spec.needs_judge]
            scorer = scorers[self._judge_teacher().name]
            self.judge = JudgeScoring(
                self.workflow, self.tokenizer, scorer, self.run.teacher.max_context_length, judged
            )
        if self.estimator.needs_critic:
            self.critic = MarftCritic.from_pretrained(
                self.run.students.path, self.estimator.options, self.run.trainer.seed
            )

    def _setup_rollout(self) -> None:
        backends = {name: p.backend for name, p in self.policies.items()}
        common = dict(
            policy_sharing=self.run.workflow.policy_sharing,
            max_prompt_len=self.run.data.max_prompt_length,
            context_layout=self.run.workflow.context_layout,
            turn_barrier=self.run.rollout.turn_barrier,
            weight_version=self._weight_version,
        )
        self.manager = RolloutManager(
            self.workflow, backends, self.tokenizer, sampling=self.run.train_sampling, **common
        )
        self.val_manager = RolloutManager(
            self.workflow, backends, self.tokenizer, sampling=self.run.val_sampling, **common
        )

    def _build_policies(self, backend_factory: BackendFactory) -> dict[str, Policy]:
        """One engine + generation backend per policy; the estimator's loss (actor config)."""
        loss_fn = actor = self.run.actor
        if self.estimator.distillation.in_engine:
            loss_fn = DistillationActorLoss(actor.config, self.estimator.distillation)
        grad_clip = self.estimator.actor_grad_clip(actor.config.grad_clip)
        settings = {
            name: EngineSettings(
                model_path=self.run.policy_path(name),
                lr=actor.config.optim.lr,
                weight_decay=actor.config.optim.weight_decay,
                grad_clip=grad_clip,
                dtype=self.run.engines.dtype,
                max_tokens_per_micro_batch=self.run.engines.max_tokens_per_micro_batch,
                seed=self.run.trainer.seed + i,
                lora=self.run.loras.get(name),
            )
            for i, name in enumerate(self.run.policies)
        }
        if self.hybrid:
            policies = {
                name: build_vllm_policy(self._policy_serving(name, i, s), s, loss_fn, self.num_mini_batches)
                for i, (name, s) in enumerate(settings.items())
            }
            self.servers += policies.values()
            return policies
        if self.generation == VLLM:
            engines = {name: self.placement.build(s, name) for name, s in settings.items()}
            policies, servers = build_adapter_policies(self.run, settings, engines, loss_fn, self.num_mini_batches)
            self.servers += servers
            return policies
        policies = {}
        for name, s in settings.items():
            engine = self.placement.build(s, name)
            policies[name] = Policy(
                name, engine, backend_factory(name, s.model_path, s.seed), loss_fn, self.num_mini_batches
            )
        return policies

    def _policy_serving(self, name: str, index: int, settings: EngineSettings) -> PolicyServing:
        run = self.run
        gpus = run.engines.gpus_per_engine
        return plan_policy_serving(run.composed, run.serving, run.trainer, gpus, name, index, settings)

    def _engine(self, model_path: str, name: str) -> PolicyEngine:
        """A forward-only engine (the teacher, the reference policy)."""
        tokens = max(self.run.engines.max_tokens_per_micro_batch, self.run.teacher.max_context_length)
        settings = EngineSettings(
            model_path=model_path, forward_only=True, dtype=self.run.engines.dtype, max_tokens_per_micro_batch=tokens
        )
        return self.placement.build(settings, name)

    def _teachers(self) -> Teachers:
        """The run's teachers: those of the config (teacher.source=path), or with frozen or live one per
        policy whose rows a teacher scores, the policy itself (teacher/teachers.py, `self_teachers`)."""
        if not self.run.self_teacher:
            return self.run.teachers
        scored = set(self._scored_roles()) if self.estimator.needs_teacher else set(self.workflow.roles)
        sharing = self.run.workflow.policy_sharing
        policies = dict.fromkeys(policy_of(a, sharing) for a in self.workflow.agents if a.role in scored)
        return self_teachers({p: self.run.policy_path(p) for p in policies})

    def _frozen_copies(self) -> set[str]:
        """teacher.source=frozen: the starting folders the frozen teacher loads a model of, one each;
        a LoRA policy scored on the engine needs none, its base model with the adapter off being its
        step-0 weights."""
        if self.run.teacher.source != FROZEN:
            return set()
        adapter_off = self.run.teacher.backend != VLLM
        return {t.model_path for t in self._teacher_models() if not (adapter_off and self.run.loras.get(t.key))}

    def _teacher_models(self) -> list[Teacher]:
        """The teachers the run loads: every teacher when an estimator reads the teacher's scores,
        else the judge's one when an estimator reads a judge's; none otherwise."""
        if self.estimator.needs_teacher:
            return list(self.teachers.entries)
        return [self._judge_teacher()] if self.estimator.needs_judge else []

    def _judge_teacher(self) -> Teacher:
        """The judge: the teacher of `teacher.model_path` (the first when it names none)."""
        entries = self.teachers.entries
        return next((t for t in entries if t.model_path == self.run.teacher.model_path), entries[0])

    def _build_teacher(self, scorers: list, topk: int) -> tuple[TeacherScoring, Attributor | None]:
        """Teacher scoring under RAS role conditions, and the PAC attribution route."""
        builder = TeacherContextBuilder(
            self.workflow,
            self.tokenizer,
            self.run.teacher.max_context_length,
            self.run.pac.reveal_reference,
            layout=self.run.workflow.context_layout,
            reference=self.run.teacher.privileged == REFERENCE,
        )
        scoring = TeacherScoring(
            builder,
            scorers,
            self.estimator.num_contrast_roles,
            self.run.pac.enable,
            self._scored_roles(),
            topk=topk,
            teachers=self.teachers,
        )
        if not self.run.pac.enable:
            return scoring, None
        # the attribution model: the teacher model, or with teacher.source frozen or live the students'
        # starting model
        model = self.run.teacher.model_path or self.run.students.path
        judge = HFBackend(model) if self.run.pac.attribution == "model" else None
        return scoring, Attributor(self.workflow, self.run.pac.attribution, judge, self.tokenizer)

    def _teacher_scorer(self, teacher: Teacher, topk: int, frozen: dict):
        """The scorer of one teacher on the run's teacher backend (one set of servers or one engine each);
        with teacher.source frozen or live, of one policy (`_self_scorer`)."""
        if self.run.self_teacher:
            return self._self_scorer(teacher, topk, frozen)
        if self.run.teacher.backend == LORA_BASE:
            engine = AdapterOff(self.policies[self.run.teacher_policy()].engine)
            return EngineTeacherScorer(engine, self.pad_id, share_prefix=self.run.teacher.share_prefix)
        return self._model_scorer(teacher, topk, "teacher" if not self.run.teachers.several else teacher.name)

    def _model_scorer(self, teacher: Teacher, topk: int, name: str):
        """A scorer over a model of its own (`teacher.model_path`): vLLM servers named `teacher_{name}`
        (`teacher` for the one teacher) or a forward-only engine named `name`."""
        run = self.run
        if run.teacher.backend == VLLM:
            servers_name = "teacher" if name == "teacher" else f"teacher_{name}"
            servers = VllmTeacher(
                run.composed, run.serving, run.trainer.device, teacher.model_path, run.engines.dtype, servers_name, topk
            )
            self.servers.append(servers)
            return servers.scorer
        engine = self._engine(teacher.model_path, name)
        return EngineTeacherScorer(engine, self.pad_id, share_prefix=self.run.teacher.share_prefix)

    def _self_scorer(self, teacher: Teacher, topk: int, frozen: dict):
        """Self-distillation's scorer of policy `teacher.key`:
        live     the policy's own engine, whose weights are the policy's now (before this step's update;
                 adapter on); a hybrid vLLM worker scores through its log-prob pass, no shared prefixes
        frozen   a LoRA policy's engine with the adapter off (B = 0 at step 0, so the base is the initial
                 policy); else a frozen copy of the starting folder on the teacher backend (a forward-only
                 engine or vLLM servers), one per folder, shared by the policies that start from it."""
        engine = self.policies[teacher.key].engine
        share = self.run.teacher.share_prefix
        if self.run.teacher.source == LIVE:
            require(
                not (self.hybrid and topk),
                "teacher.source",
                "live with a top-k distillation mode needs the policy engine's packed forward, which the vllm "
                "path's hybrid workers do not have; use actor_rollout_ref.rollout.name=hf, LoRA, or a frozen teacher",
            )
            return EngineTeacherScorer(engine, self.pad_id, share_prefix=share and not self.hybrid)
        if teacher.model_path not in self._frozen_copies():
            return EngineTeacherScorer(AdapterOff(engine), self.pad_id, share_prefix=share)
        if teacher.model_path not in frozen:
            frozen[teacher.model_path] = self._model_scorer(teacher, topk, f"frozen_{teacher.key}")
        return frozen[teacher.model_path]

    def _scored_roles(self) -> list[str]:
        return [r for r in self.workflow.roles if self.estimator.role_estimator(r).settings.uses_teacher]

    def _routing_values(self) -> set[str]:
        """The values rows are routed to teachers by (distillation.teacher_key): the scored roles,
        or the training problems' data_source; with teacher.source frozen or live the policies."""
        if self.teachers.route_by == POLICY:
            return {t.key for t in self.teachers.entries}
        if self.teachers.route_by == "role":
            return set(self._scored_roles())
        return {p.data_source for p in self.stream.problems}

    def fit(self) -> dict[str, float]:
        """Train until trainer.total_training_steps; returns the last step's metrics."""
        self._resume()
        tracking = open_tracking(self.run.trainer, self.run.composed)
        metrics: dict[str, float] = {}
        try:
            if self.val_problems and self.run.trainer.val_before_train and self.step == 0:
                tracking.log(self.validate(), step=0)
            while self.step < self.run.trainer.total_training_steps:
                metrics = self.train_step()
                if self._due(self.run.trainer.test_freq) and self.val_problems:
                    metrics.update(self.validate())
                tracking.log(metrics, step=self.step)
                if self._due(self.run.trainer.save_freq) or self.step == self.run.trainer.total_training_steps:
                    self.save()
        finally:
            tracking.finish()
            self.close()
        return metrics

    def train_step(self) -> dict[str, float]:
        """One step of the module docstring; returns its metrics (timings under timing_s/)."""
        timings: dict[str, float] = {}
        metrics: dict[str, float] = {}
        if self.staleness is None and self._scores_as_done():
            rollout, scored = self._play_scored(timings)
        else:
            with _timed(timings, "rollout"):
                rollout = self._next_rollout()
            scored = Scored()
        groups = rollout.groups
        self.data_position = rollout.position
        results = episodes_of(groups)
        if self.teacher is not None and scored.teacher is None:
            with _timed(timings, "teacher"):
                scored.teacher, scored.attributions = asyncio.run(self._teacher_scores(results))
        if self.judge is not None and scored.judge is None:
            with _timed(timings, "judge"):
                scored.judge = asyncio.run(self.judge.score(results))
        if scored.judge is not None:
            metrics.update(scored.judge.metrics())
        batch = to_dataproto(
            groups, None, self.run.data.max_prompt_length, self.run.data.max_response_length, self.pad_id
        )
        if scored.teacher is not None:
            metrics.update(step_metrics(batch, scored.teacher, scored.attributions))
        rows = {name: np.flatnonzero(batch.non_tensor_batch["policy"] == name) for name in self.policies}
        metrics.update(self._rollout_metrics(results, batch))
        metrics.update(rollout.metrics)
        with _timed(timings, "log_prob"):
            old = torch.zeros_like(batch.batch["rollout_log_probs"])
            entropy = torch.zeros_like(old)
            for name, policy in self.policies.items():
                if len(rows[name]):
                    old[rows[name]], entropy[rows[name]] = policy.engine.log_probs_and_entropy(
                        batch.select_idxs(rows[name])
                    )
            batch.batch["old_log_probs"] = old
            if self.reference is not None:
                batch.batch["ref_log_prob"] = self.reference.infer_batch(batch)
            if self.critic is not None:
                features = self._critic_features(batch)
                batch.batch["critic_values"] = self.critic.values(features)
        with _timed(timings, "diagnostics"):
            if self.token_classes is not None:
                responses = batch.batch["responses"]
                lengths = batch.batch["attention_mask"][:, -responses.shape[1] :].sum(-1)
                batch.batch["token_class"] = self.token_classes.batch(responses, lengths)
            metrics.update(entropy_metrics(entropy, batch))
        with _timed(timings, "advantage"):
            batch = compute_advantages(batch, self.estimator, groups, self.workflow)
            metrics.update(batch.meta_info["advantage_metrics"])
        if self.staleness is not None:
            metrics.update(self.staleness.apply(batch, {name: p.version for name, p in self.policies.items()}))
        with _timed(timings, "update"):
            for name, policy in self.policies.items():
                if len(rows[name]):
                    metrics.update(policy.update(batch.select_idxs(rows[name])))
                if self.background is not None:
                    # its backend generates with the new weights while the other policies update
                    with _timed(timings, "weight_sync"):
                        policy.sync(self.step + 1)
            if self.critic is not None:
                returns, old_values = batch.batch["returns"][:, 0], batch.batch["critic_values"]
                metrics.update(self.critic.update(features, returns, old_values, self.num_mini_batches))
        self.step += 1
        if self.background is not None:
            self.background.synced(self.step)
        else:
            with _timed(timings, "weight_sync"):
                for policy in self.policies.values():
                    policy.sync(self.step)
        metrics.update({f"timing_s/{k}": v for k, v in timings.items()})
        return metrics

    def validate(self) -> dict[str, float]:
        """Evaluation sampling on the held-out problems: accuracy, agreement per turn, turns."""
        k = 1
        records = asyncio.run(evaluate(self.val_manager, self.val_problems, k, self.run.data.train_batch_size))
        return {
            f"val/{key}": value
            for key, value in summarize(records, self.run.workflow.horizon, self.workflow.agrees).items()
            if isinstance(value, int | float)
        }

    def save(self) -> Path:
        """An atomic checkpoint of every policy (HF weights + optimizer), the critic head, the data
        position and the RNG states."""
        components = {
            f"policy_{name}": (lambda folder, p=p: p.save(folder, self.step)) for name, p in self.policies.items()
        }
        if self.critic is not None:
            components["critic"] = lambda folder: torch.save(self.critic.state_dict(), folder / CRITIC_FILE)
        state = TrainerState(
            step=self.step, data_position=self.data_position, config_hash=config_hash(self.run.composed)
        )
        return save_checkpoint(
            self.checkpoint_root, state, self.run.composed, components, self.run.trainer.max_actor_ckpt_to_keep
        )

    def close(self) -> None:
        if self.background is not None:
            self.background.close()  # the rollouts in flight are dropped (docs/checkpoints.md)
        self.manager.close()
        self.val_manager.close()
        for servers in self.servers:
            servers.close()

    def _resume(self) -> None:
        """Continue from the checkpoint the start-up check chose and verified (`resume_point`), if any."""
        path = self.resume_point
        if path is None:
            return
        step = int(path.name.rsplit("_", 1)[-1])
        components = {f"policy_{name}": (lambda folder, p=p: p.load(folder, step)) for name, p in self.policies.items()}
        if self.critic is not None:
            components["critic"] = lambda folder: self.critic.load_state_dict(
                torch.load(folder / CRITIC_FILE, weights_only=False)
            )
        state = load_checkpoint(path, components)
        self.stream.load_state_dict(state.data_position)
        self.data_position = self.stream.state_dict()
        self.step = state.step
        logger.info("resumed from %s at step %d", path, self.step)

    def _weight_version(self, policy: str) -> int:
        return self.policies[policy].version

    def _next_rollout(self) -> Rollout:
        """This step's rollout: played now (max_off_policy 0), else taken from the background thread."""
        if self.staleness is None:
            return self._play()
        if self.background is None:
            self.background = BackgroundRollout(self._play, self.staleness.bound, self.step)
        return self.background.take(self.step)

    def _play(self) -> Rollout:
        """The next batch of problems played with the backends' current weights."""
        problems = self.stream.next_batch()
        self.manager.begin_step()
        groups = asyncio.run(self._rollouts(problems))
        return Rollout(groups, self._manager_metrics(), self.stream.state_dict())

    def _play_scored(self, timings: dict[str, float]) -> tuple[Rollout, Scored]:
        """The next batch played now, its episodes scored as they finish (_rollouts_scored); only in
        lockstep between rollout and update (max_off_policy 0)."""
        problems = self.stream.next_batch()
        self.manager.begin_step()
        groups, scored = asyncio.run(self._rollouts_scored(problems, timings))
        return Rollout(groups, self._manager_metrics(), self.stream.state_dict()), scored

    def _manager_metrics(self) -> dict[str, float]:
        metrics = {f"rollout/{k}": float(v) for k, v in self.manager.metrics.as_dict().items()}
        return metrics | {f"rollout/{k}": float(v) for k, v in self.manager.tool_metrics().items()}

    async def _rollouts(self, problems, on_episode_done=None) -> list[RolloutGroup]:
        if self.run.rollout.tree_sampling:
            return await TreeSampler(self.manager, self.run.rollout.group_size).run(problems)
        return await self.manager.run(problems, group_size=self.run.rollout.group_size, on_episode_done=on_episode_done)

    def _scores_as_done(self) -> bool:
        """Whether the teacher and the judge score episodes as they finish (teacher/overlap.py): without
        the turn barrier, where they score, unless they run on a policy's training engine (lora_base, a
        live teacher, a frozen one that is a LoRA policy's base model), which a hybrid vLLM rollout
        shares its GPU with."""
        scores = self.teacher is not None or self.judge is not None
        source = self.run.teacher.source
        on_policy_engine = (
            self.run.teacher.backend == LORA_BASE
            or source == LIVE
            or (source == FROZEN and any(t.model_path not in self._frozen_copies() for t in self.teacher_models))
        )
        return scores and not self.run.rollout.turn_barrier and not on_policy_engine

    async def _rollouts_scored(self, problems, timings: dict[str, float]) -> tuple[list[RolloutGroup], Scored]:
        """The rollout with its episodes scored as they finish; timings: the rollout, the wait for the
        scoring left after it (scoring_left) and the scoring's own seconds (scoring_busy)."""
        scoring = ScoringAsDone(self._score)
        with _timed(timings, "rollout"):
            groups = await self._rollouts(problems, scoring.add)
        with _timed(timings, "scoring_left"):
            scored = await scoring.drain(episodes_of(groups))
        timings["scoring_busy"] = scoring.busy_s
        return groups, scored

    async def _score(self, results) -> Scored:
        """The teacher's scores (with their attributions) and the judge's of `results`."""
        scored = Scored()
        if self.teacher is not None:
            scored.teacher, scored.attributions = await self._teacher_scores(results)
        if self.judge is not None:
            scored.judge = await self.judge.score(results)
        return scored

    async def _teacher_scores(self, results) -> tuple[ScoringStats, Attributions | None]:
        episodes = {r.episode_id: r.episode for r in results}
        attributions = await self.attributor.attribute(episodes) if self.attributor is not None else None
        stats = await self.teacher.score(results, attributions, self.run.data.max_response_length)
        return stats, attributions

    def _critic_features(self, batch: DataProto) -> torch.Tensor:
        width = batch.batch["prompts"].shape[1]
        return self.critic.encode(batch.batch["prompts"], batch.batch["attention_mask"][:, :width])

    def _rollout_metrics(self, results, batch: DataProto) -> dict[str, float]:
        turns = [len(r.episode.turns) for r in results]
        agreed = [r.episode.turns[-1].agreed for r in results]
        out = {
            "rollout/accuracy": float(np.mean([r.judgement.correct for r in results])),
            "rollout/team_reward": float(np.mean([r.judgement.team for r in results])),
            "rollout/mean_turns": float(np.mean(turns)),
            "rollout/agreement": float(np.mean(agreed)),
            "rollout/truncated_responses": float(batch.meta_info["truncated_responses"]),
            "rollout/failed_samples": float(batch.meta_info["failed_samples"]),
        }
        roles = batch.non_tensor_batch["role"]
        lengths = batch.batch["response_mask"].sum(-1).float()
        for role in sorted(set(roles)):
            mine = roles == role
            out[f"rollout/{role}/response_length"] = float(lengths[torch.from_numpy(mine)].mean())
            out[f"rollout/{role}/local_reward"] = float(batch.batch["local_reward"][torch.from_numpy(mine)].mean())
        return out

    def _due(self, freq) -> bool:
        return freq is not None and freq > 0 and self.step % freq == 0


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


@contextmanager
def _timed(timings: dict[str, float], key: str):
    start = time.perf_counter()
    yield
    timings[key] = timings.get(key, 0.0) + time.perf_counter() - start


def run(config: RunConfig) -> dict[str, float]:
    """Train the run `config` describes; the entry point's body."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return Trainer(config).fit()
