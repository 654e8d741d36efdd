"""The training loop: independent per-role policies on verl's engine, end to end, on the parts
trainer/build.py builds from the run config.

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
                 of every observation (marft); these and the update's log-probs are those of
                 softmax(z / T) at the rollout's temperature T (1 under greedy decoding), the
                 distribution the backends sampled from and recorded (rollout_log_probs)
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
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from verl import DataProto

from verl_masopd.algos import compute_advantages
from verl_masopd.algos.diagnostics import entropy_metrics
from verl_masopd.config.run import RunConfig
from verl_masopd.rollout.batch import to_dataproto
from verl_masopd.rollout.evaluation import evaluate
from verl_masopd.rollout.records import RolloutGroup, episodes_of
from verl_masopd.rollout.summary import summarize
from verl_masopd.rollout.tree import TreeSampler
from verl_masopd.teacher.attribution import Attributions
from verl_masopd.teacher.metrics import step_metrics
from verl_masopd.teacher.overlap import Scored, ScoringAsDone
from verl_masopd.teacher.scoring import ScoringStats
from verl_masopd.trainer.background_rollout import BackgroundRollout, Rollout
from verl_masopd.trainer.build import BackendFactory, build_trainer_parts, hf_backend
from verl_masopd.trainer.checkpoint import TrainerState, config_hash, load_checkpoint, save_checkpoint
from verl_masopd.trainer.tracking import open_tracking

logger = logging.getLogger(__name__)

CRITIC_FILE = "critic.pt"


class Trainer:
    """Runs `fit` on the parts `build_trainer_parts` builds from the run config (`validate_config` of
    the composed config): the loop, validation, checkpoints, resuming and closing.

    `backend_factory(policy, model_path, seed)` makes each policy's generation backend on the
    hf generation path (default: the HF backend); on the vllm path (serving/generation_path.py)
    each policy is verl's hybrid actor with its own vLLM servers (serving/hybrid_policy.py).
    """

    def __init__(self, run: RunConfig, backend_factory: BackendFactory = hf_backend):
        self.run = run
        parts = build_trainer_parts(run, backend_factory)
        self.resume_point = parts.resume_point
        self.workflow = parts.workflow
        self.tokenizer = parts.tokenizer
        self.pad_id = parts.pad_id
        self.token_classes = parts.token_classes
        self.stream = parts.stream
        self.val_problems = parts.val_problems
        self.teachers = parts.teachers
        self.num_mini_batches = parts.num_mini_batches
        self.policies = parts.policies
        self.servers = parts.servers
        self.reference = parts.reference
        self.teacher = parts.teacher
        self.attributor = parts.attributor
        self.judge = parts.judge
        self.critic = parts.critic
        self.scores_as_done = parts.scores_as_done
        self.manager = parts.manager
        self.val_manager = parts.val_manager
        self.staleness = parts.staleness
        # the step state a checkpoint records
        self.checkpoint_root = Path(run.trainer.default_local_dir).expanduser()
        self.step = 0
        self.background: BackgroundRollout | None = None  # started by the first step that needs it
        self.data_position = self.stream.state_dict()  # after the problems of the last rollout trained

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
        if self.staleness is None and self.scores_as_done:
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
        temperature = self.run.train_sampling.log_prob_temperature
        with _timed(timings, "log_prob"):
            old = torch.zeros_like(batch.batch["rollout_log_probs"])
            entropy = torch.zeros_like(old)
            for name, policy in self.policies.items():
                if len(rows[name]):
                    old[rows[name]], entropy[rows[name]] = policy.engine.log_probs_and_entropy(
                        batch.select_idxs(rows[name]), temperature
                    )
            batch.batch["old_log_probs"] = old
            if self.reference is not None:
                batch.batch["ref_log_prob"] = self.reference.infer_batch(batch, temperature)
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
            batch = compute_advantages(batch, self.run.estimator, groups, self.workflow)
            metrics.update(batch.meta_info["advantage_metrics"])
        if self.staleness is not None:
            metrics.update(self.staleness.apply(batch, {name: p.version for name, p in self.policies.items()}))
        with _timed(timings, "update"):
            for name, policy in self.policies.items():
                if len(rows[name]):
                    metrics.update(policy.update(batch.select_idxs(rows[name]), temperature))
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


@contextmanager
def _timed(timings: dict[str, float], key: str):
    start = time.perf_counter()
    yield
    timings[key] = timings.get(key, 0.0) + time.perf_counter() - start


def run(config: RunConfig) -> dict[str, float]:
    """Train the run `config` describes; the entry point's body."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return Trainer(config).fit()
