"""Contexts under SmolLM2's chat template, which inserts a default system message before a leading
user message: neither layout produces two system messages, and the teacher's x_r is the student's u."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from verl_masopd.teacher.contexts import TeacherContextBuilder
from verl_masopd.tokens.chat import inserts_default_system
from verl_masopd.tokens.context import ContextEncoder
from verl_masopd.workflows.math import MathWorkflow
from verl_masopd.workflows.problem import Problem

pytestmark = pytest.mark.integration

SYSTEM = "<|im_start|>system\n"


@pytest.fixture(scope="module")
def smollm2_tokenizer(smollm2_path):
    return AutoTokenizer.from_pretrained(smollm2_path)


def test_default_system_templates_are_recognised(smollm2_tokenizer):
    tiny = AutoTokenizer.from_pretrained("verl_masopd/tiny_world/weights/math/student")
    assert inserts_default_system(smollm2_tokenizer) and not inserts_default_system(tiny)


@pytest.mark.parametrize("layout", ["role_first", "role_last"])
def test_one_system_message_in_either_layout(smollm2_tokenizer, layout):
    workflow = MathWorkflow()
    episode = workflow.reset(Problem(uid="p", domain="math", statement="What is 6 times 7?", answer="42"))
    agent = workflow.agents[0]
    encoder = ContextEncoder(workflow, smollm2_tokenizer, layout)
    text = smollm2_tokenizer.decode(encoder.ids(episode, agent, 0))
    assert text.count(SYSTEM) == 1
    instruction = workflow.render(episode, agent, 0, role=agent.role)[0]["content"]
    # role_first: the instruction is the system message; role_last: the template's own
    default = "You are a helpful AI assistant named SmolLM" in text
    assert default == (layout == "role_last")
    if layout == "role_last":  # the role condition after the observation
        assert text.index("What is 6 times 7?") < text.index(instruction)
    assert text.endswith("<|im_start|>assistant\n")
    teacher = TeacherContextBuilder(workflow, smollm2_tokenizer, 4096, layout=layout)
    messages, _ = teacher.messages(episode, agent.name, 0, agent.role, None)
    assert [m["role"] for m in messages] == (["user", "user"] if layout == "role_last" else ["system", "user"])
    context = teacher.build(episode, agent.name, 0, agent.role, None, response_len=16)
    assert context.ids == encoder.ids(episode, agent, 0)
