"""The search team trained through the real trainer on the tiny models: retrieval from a real BM25
index inside the Searchers' replies, role-selective supervision with `algorithm.per_role`
(Searcher → opd, Leader → grpo by question, Answerer → grpo over its episode's candidates), one
shared policy. The teacher scores the Searchers' rows only; every role's rows train."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from data_prep.schema import qa_row
from data_prep.writer import write_rows
from verl_masopd.config import compose_config
from verl_masopd.config.validate import validate_config
from verl_masopd.rollout.backend import Generation, SamplingParams
from verl_masopd.rollout.hf_backend import HFBackend
from verl_masopd.rollout.records import STOP
from verl_masopd.trainer.loop import Trainer
from verl_masopd.workflows.search import PAPER_INSTRUCTIONS

pytestmark = pytest.mark.integration

QUESTIONS = [("What is the capital of Arland?", "Bex"), ("What is the capital of Corvin?", "Dun")]


@pytest.fixture(scope="module")
def search_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("search-data")
    rows = [
        qa_row(data_source="toy", uid=f"q{i}", split="train", question=q, answers=[a], metadata={})
        for i, (q, a) in enumerate(QUESTIONS)
    ]
    write_rows(rows, folder / "train.parquet")
    return folder


class SearchMixBackend:
    """The tiny model's own samples, and every other request of each role a scripted, well-formed
    reply that stops at the sampling's stop strings; scripted log-probs are the model's own."""

    def __init__(self, model_path: str, seed: int):
        self.inner = HFBackend(model_path, seed=seed)
        self.tokenizer = self.inner.tokenizer
        self.requests: dict[str, int] = {}

    async def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Generation]:
        sampled = await self.inner.generate(prompts, sampling)
        out = []
        for prompt, generation in zip(prompts, sampled, strict=True):
            text = self.tokenizer.decode(prompt)
            role = next(r for r in ("leader", "searcher", "answerer") if PAPER_INSTRUCTIONS[r][:24] in text)
            self.requests[role] = self.requests.get(role, 0) + 1
            scripted = self.requests[role] % 2 == 1
            out.append(self._scripted(prompt, text, role, sampling) if scripted else generation)
        return out

    def update_weights(self, state_dict: dict, version: int) -> None:
        self.inner.update_weights(state_dict, version)

    def _scripted(self, prompt: list[int], text: str, role: str, sampling: SamplingParams) -> Generation:
        reply = text.rsplit("<|im_start|>assistant", 1)[1]
        question, answer = next((q, a) for q, a in QUESTIONS if q in text or q.split()[-1] in text)
        if role == "leader":
            reply = "<select>1</select>" if "1 of 1 sent" in text else f"<subtask>{question}</subtask>"
        elif role == "searcher":
            reply = f"<summary>{answer}</summary>" if "<information>" in reply else f"<search>{question}</search>"
        else:
            reply = f"<answer>{answer}</answer>"
        ends = [reply.find(s) + len(s) for s in sampling.stop if s in reply]
        ids = self.tokenizer.encode(reply[: min(ends)] if ends else reply, add_special_tokens=False)
        ids = ids if ends else ids + [self.tokenizer.eos_token_id]
        with torch.no_grad():
            logits = self.inner.model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
        log_probs = logits.log_softmax(-1).gather(-1, torch.tensor(ids).unsqueeze(-1)).squeeze(-1)
        return Generation(ids, log_probs.tolist(), STOP)


def search_config(search_data, toy_search_index, tiny_model_path, tiny_teacher_path, tmp_path, searcher: str):
    """Two steps of the search team, the Searchers by `searcher`, the Answerer by GRPO over its
    episode's candidates, the Leader by GRPO (the default estimator)."""
    return compose_config(
        [
            "preset=cpu",
            "engines.placement=local",
            f"students.path={tiny_model_path}",
            f"teacher.model_path={tiny_teacher_path}",
            f"data.train_files=[{search_data / 'train.parquet'}]",
            "data.train_batch_size=1",
            "data.max_response_length=96",
            "rollout.group_size=2",
            "workflow.name=search",
            "workflow.domain=qa",
            "workflow.horizon=4",
            "workflow.policy_sharing=shared",
            f"+workflow.options.retriever={toy_search_index}",
            "+workflow.options.max_waves=1",
            "+workflow.options.max_searchers_per_wave=2",
            "+workflow.options.answer_candidates=2",
            "+workflow.options.max_calls=2",
            "+workflow.options.max_obs_tokens=48",
            "trainer.total_training_steps=2",
            "trainer.save_freq=-1",
            "trainer.logger=[console]",
            f"trainer.default_local_dir={tmp_path / 'checkpoints'}",
            "algorithm.adv_estimator=grpo",
            f"+algorithm.per_role.searcher.estimator={searcher}",
            "+algorithm.per_role.answerer.estimator=grpo",
            "+algorithm.per_role.answerer.group_by=episode",
        ]
    )


def test_two_steps_of_role_selective_supervision(
    search_data, toy_search_index, tiny_model_path, tiny_teacher_path, tmp_path
):
    cfg = search_config(search_data, toy_search_index, tiny_model_path, tiny_teacher_path, tmp_path, "opd")
    trainer = Trainer(validate_config(cfg), backend_factory=lambda policy, path, seed: SearchMixBackend(path, seed))
    initial = AutoModelForCausalLM.from_pretrained(tiny_model_path).state_dict()
    steps = [trainer.train_step() for _ in range(2)]
    trainer.close()

    assert list(trainer.policies) == ["shared"]
    for metrics in steps:
        assert math.isfinite(metrics["shared/actor/pg_loss"])
        assert metrics["rollout/tool_calls"] >= 1
        # each step's searches go through the step's query cache (cleared at the step's start)
        assert 1 <= metrics["rollout/tool/search/cache_lookups"] <= metrics["rollout/tool_calls"]
        hits = metrics["rollout/tool/search/cache_hits"]
        assert metrics["rollout/tool/search/cache_hit_rate"] == hits / metrics["rollout/tool/search/cache_lookups"]
        assert "teacher/searcher/reverse_kl" in metrics
        assert not [k for k in metrics if k.startswith(("teacher/leader", "teacher/answerer"))]
    estimators = {k for m in steps for k in m if k.startswith("per_role/") and k.endswith("/advantage_mean")}
    assert {"per_role/searcher/opd/advantage_mean", "per_role/leader/grpo/advantage_mean"} <= estimators
    weights = trainer.policies["shared"].engine.hf_state_dict()
    assert any(not torch.equal(weights[k], initial[k]) for k in initial)


def test_two_steps_of_the_prompted_critic(search_data, toy_search_index, tiny_model_path, tiny_teacher_path, tmp_path):
    """The Searchers by GRPO on the teacher's verdicts (judge_grpo): the teacher judges every
    Searcher reply and scores no token."""
    cfg = search_config(search_data, toy_search_index, tiny_model_path, tiny_teacher_path, tmp_path, "judge_grpo")
    trainer = Trainer(validate_config(cfg), backend_factory=lambda policy, path, seed: SearchMixBackend(path, seed))
    initial = AutoModelForCausalLM.from_pretrained(tiny_model_path).state_dict()
    steps = [trainer.train_step() for _ in range(2)]
    trainer.close()

    assert trainer.teacher is None and trainer.judge is not None
    for metrics in steps:
        assert metrics["judge/judged"] >= 1  # the scripted Leader sends a Searcher
        assert 0.0 < metrics["judge/searcher/score"] < 1.0
        assert not [k for k in metrics if k.startswith("teacher/")]
        assert "per_role/searcher/judge_grpo/advantage_mean" in metrics
        assert metrics["timing_s/judge"] > 0
    weights = trainer.policies["shared"].engine.hf_state_dict()
    assert any(not torch.equal(weights[k], initial[k]) for k in initial)
