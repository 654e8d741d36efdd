"""examples/calculator_agent.py, imported through `imports=`, trains for two GRPO steps on the CPU
setup with local engines: the calculator is called inside replies during training (the step's
tool metrics count the calls and their observation tokens), the replies that used it answer from
its result, and the policy's parameters change.

The untrained tiny student never writes "</calc>" by itself (six tokens of a 691-token
vocabulary), so every other new reply is a scripted one that uses the calculator, as the trainer
tests' ScriptedMixBackend scripts correct outputs so that rewards vary within a group."""

import re
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl_masopd.config import compose_config
from verl_masopd.config.validate import validate_config
from verl_masopd.rollout.backend import Generation, SamplingParams
from verl_masopd.rollout.hf_backend import HFBackend
from verl_masopd.rollout.records import LENGTH, STOP
from verl_masopd.trainer.loop import Trainer

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "calculator_agent.py"
ASSISTANT = "<|im_start|>assistant\n"
RESULT = re.compile(r"<result>(.*?)</result>")


class HalfCalculatorBackend:
    """The tiny student's own samples for every other new reply; the other new replies are those
    of a scripted policy that writes the problem's expression as a call, `<calc>a * b + c</calc>`,
    where generation stops, and once the observation is in the reply goes on with `#### VALUE`,
    VALUE read from it. Scripted tokens carry the model's own log-probs (a forward pass); the
    trainer recomputes old log-probs with the engine anyway."""

    def __init__(self, model_path: str, seed: int):
        self.inner = HFBackend(model_path, seed=seed)
        self.tokenizer = self.inner.tokenizer
        self.new_replies = 0

    async def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Generation]:
        scripted = {}
        for i, prompt in enumerate(prompts):
            context, _, so_far = self.tokenizer.decode(prompt).rpartition(ASSISTANT)
            result = RESULT.search(so_far)
            if result is not None:
                scripted[i] = f"\n#### {result.group(1)}"
                continue
            self.new_replies += 1
            if self.new_replies % 2:
                statement = re.search(r"Compute (.+)\.<\|im_end\|>", context).group(1)
                scripted[i] = "<calc>" + statement.replace("\\times", "*") + "</calc>"
        sampled = iter(await self.inner.generate([p for i, p in enumerate(prompts) if i not in scripted], sampling))
        return [
            self._scripted(prompt, scripted[i], sampling) if i in scripted else next(sampled)
            for i, prompt in enumerate(prompts)
        ]

    def update_weights(self, state_dict: dict, version: int) -> None:
        self.inner.update_weights(state_dict, version)

    def _scripted(self, prompt: list[int], text: str, sampling: SamplingParams) -> Generation:
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if not text.endswith("</calc>"):
            ids.append(self.tokenizer.eos_token_id)
        finish = LENGTH if len(ids) > sampling.max_new_tokens else STOP
        ids = ids[: sampling.max_new_tokens]
        with torch.no_grad():
            logits = self.inner.model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
        log_probs = logits.log_softmax(-1).gather(-1, torch.tensor(ids).unsqueeze(-1)).squeeze(-1)
        return Generation(ids, log_probs.tolist(), finish)


def test_calculator_example_trains_with_calls_inside_replies(trainer_overrides, tiny_model_path):
    cfg = compose_config(
        trainer_overrides(
            "math",
            f"imports=[{EXAMPLE}]",
            "workflow.name=calculator",
            "workflow.horizon=1",
            "+workflow.options.max_calls=2",
            "algorithm.adv_estimator=grpo",
            "data.max_response_length=48",
            "trainer.save_freq=-1",
        )
    )
    trainer = Trainer(
        validate_config(cfg), backend_factory=lambda policy, path, seed: HalfCalculatorBackend(path, seed)
    )
    initial = AutoModelForCausalLM.from_pretrained(tiny_model_path).state_dict()
    steps = [trainer.train_step() for _ in range(2)]
    trainer.close()

    assert trainer.workflow.name == "calculator" and trainer.workflow.calculator.max_calls == 2
    for metrics in steps:
        # of the group's 2 replies the scripted one calls the calculator once and answers from its
        # result, which is right; the sampled one makes no call and is wrong
        assert (metrics["rollout/tool_calls"], metrics["rollout/tool/ok"]) == (1, 1)
        assert metrics["rollout/observation_tokens"] > 0
        assert metrics["rollout/accuracy"] == 0.5
    weights = trainer.policies["reasoner"].engine.hf_state_dict()
    assert any(not torch.equal(weights[k], initial[k]) for k in initial), "the reasoner's policy did not change"
