"""A few MAS-OPD steps in the tiny world lower the student's reverse KL to the tiny teacher on the
training batch: the real trainer (verl's engine on CPU, the compact math workflow, the sandbox, the
shipped student and teacher), with a generation backend that replays its first sample of every
prompt, so each step's batch holds the same responses and the metric
teacher/<role>/reverse_kl = mean over response tokens of log π_θ(y_k | ·) − log π_T(y_k | ·)
is measured on one batch by successive policies. RAS is off (ras_coef = 0, A_k = s_k): its role term
raises the likelihood of the sampled tokens whatever the teacher says, which on a fixed batch raises
this sample estimate of the reverse KL."""

import math

import pytest
import torch

from verl_masopd.config import compose_config
from verl_masopd.config.validate import validate_config
from verl_masopd.rollout.backend import Generation
from verl_masopd.rollout.hf_backend import HFBackend
from verl_masopd.tiny_world import world
from verl_masopd.trainer.loop import Trainer

pytestmark = pytest.mark.integration


class ReplayBackend:
    """A real HF backend that answers a prompt it has seen with the tokens it generated first,
    their log-probs recomputed under the current weights (the metric reads the rollout's log-probs)."""

    def __init__(self, model_path: str, seed: int):
        self.inner = HFBackend(model_path, seed=seed)
        self.tokenizer = self.inner.tokenizer
        self.seen = {}

    async def generate(self, prompts, sampling):
        new = list(dict.fromkeys(tuple(p) for p in prompts if tuple(p) not in self.seen))
        if new:
            for prompt, generation in zip(
                new, await self.inner.generate([list(p) for p in new], sampling), strict=True
            ):
                self.seen[prompt] = generation
        return [self._rescored(list(p), self.seen[tuple(p)]) for p in prompts]

    def _rescored(self, prompt: list[int], generation: Generation) -> Generation:
        ids = generation.token_ids
        with torch.no_grad():
            logits = self.inner.model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
        log_probs = logits.log_softmax(-1).gather(-1, torch.tensor(ids).unsqueeze(-1)).squeeze(-1)
        return Generation(ids, log_probs.tolist(), generation.finish_reason)

    def update_weights(self, state_dict, version):
        self.inner.update_weights(state_dict, version)


LOSS = "distillation.distillation_loss"
TOP_K = [f"{LOSS}.topk=8", f"{LOSS}.use_policy_gradient=false"]


@pytest.mark.parametrize(
    "mode",
    [
        [],  # the sampled-token advantage (k1)
        [f"{LOSS}.loss_mode=forward_kl_topk", *TOP_K],  # verl's top-k forward KL, in the engine's loss
        [f"{LOSS}.loss_mode=jsd", *TOP_K],  # the top-k generalised JSD
    ],
    ids=["k1", "forward_kl_topk", "jsd"],
)
def test_distillation_steps_lower_the_reverse_kl_to_the_teacher(mode, tmp_path):
    models = world.models("math")
    train_file, _ = world.ensure_data(tmp_path / "data", "math", 4, 1)
    cfg = compose_config(
        [
            "preset=tiny_world",
            "engines.placement=local",
            f"students.path={models['student']}",
            f"teacher.model_path={models['teacher']}",
            f"data.train_files=[{train_file}]",
            "workflow.domain=math",
            "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.optim.lr=1e-3",
            "algorithm.masopd.ras_coef=0",
            "trainer.total_training_steps=3",
            "trainer.logger=[console]",
            f"trainer.default_local_dir={tmp_path / 'checkpoints'}",
            *mode,
        ]
    )
    trainer = Trainer(validate_config(cfg), backend_factory=lambda policy, path, seed: ReplayBackend(path, seed))
    kls = [trainer.train_step() for _ in range(3)]
    trainer.close()
    reasoner, tool_user = ([m[f"teacher/{role}/reverse_kl"] for m in kls] for role in ("reasoner", "tool_user"))
    # the student's Reasoner is the teacher's with a role confusion: far from it, and pulled towards it
    # step by step (measured on this batch, k1: 3.52, 3.29, 2.82)
    assert reasoner[0] > 1.0 and reasoner[0] > reasoner[1] > reasoner[2] and reasoner[2] < 0.9 * reasoner[0], reasoner
    if mode:  # the OPD term is the engine's loss: none of it in the advantage, verl's loss reported
        assert all(m["masopd/reasoner/opd_term"] == 0 for m in kls)
        assert all(m["reasoner/distillation/loss"] > 0 for m in kls)
    # its Tool-User is the teacher's own: it stays close
    assert max(abs(kl) for kl in tool_user) < 0.2, tool_user


@pytest.mark.parametrize("weighting", ["fixed", "confidence"])
def test_two_teachers_score_every_response_and_combine(weighting, tmp_path):
    """distillation.teacher_models: the shipped teacher and the student's own start (a weaker
    teacher) on the engine backend, one engine each; fixed weights 3:1, or confidence weights."""
    models = world.models("math")
    train_file, _ = world.ensure_data(tmp_path / "data", "math", 4, 1)
    teachers = {"strong": {"model_path": models["teacher"], "weight": 3.0}, "weak": {"model_path": models["student"]}}
    cfg = compose_config(
        [
            "preset=tiny_world",
            "engines.placement=local",
            f"students.path={models['student']}",
            "teacher.model_path=null",
            f"++distillation.teacher_models={teachers}".replace("'", ""),
            f"distillation.teacher_weighting={weighting}",
            f"data.train_files=[{train_file}]",
            "workflow.domain=math",
            "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "trainer.total_training_steps=1",
            "trainer.logger=[console]",
            f"trainer.default_local_dir={tmp_path / 'checkpoints'}",
        ]
    )
    trainer = Trainer(validate_config(cfg), backend_factory=lambda policy, path, seed: ReplayBackend(path, seed))
    metrics = trainer.train_step()
    trainer.close()
    strong, weak = metrics["teacher/strong/weight"], metrics["teacher/weak/weight"]
    assert strong + weak == pytest.approx(1.0)
    if weighting == "fixed":
        assert (strong, weak) == (pytest.approx(0.75), pytest.approx(0.25))
    else:  # the student's own start is the likelier teacher of the student's samples
        assert weak > strong
    assert all(math.isfinite(metrics[f"teacher/{role}/reverse_kl"]) for role in ("reasoner", "tool_user"))
