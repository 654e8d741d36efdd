"""Teacher scoring on verl's real engine (forward-only, CPU) equals a plain transformers forward of
each unpadded teacher sequence x_q + y, on the response positions, for contexts of any length."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl_masopd.chat import encode_messages
from verl_masopd.teacher.engine_scorer import EngineTeacherScorer
from verl_masopd.teacher.scoring import ScoreRequest
from verl_masopd.trainer.engine import EngineSettings, PolicyEngine

pytestmark = pytest.mark.integration


def transformers_response_log_probs(model, request: ScoreRequest) -> list[float]:
    """log p(y_i | x_q, y_<i) from one unpadded forward: logits row |x_q| − 1 + i scores y_i."""
    seq = torch.tensor([request.context_ids + request.response_ids])
    with torch.no_grad():
        log_probs = torch.log_softmax(model(input_ids=seq).logits.float()[0], dim=-1)
    start = len(request.context_ids) - 1
    return [log_probs[start + i, y].item() for i, y in enumerate(request.response_ids)]


async def test_engine_scores_equal_transformers_forward(tiny_teacher_path, tiny_tokenizer):
    teacher = PolicyEngine.local(EngineSettings(model_path=tiny_teacher_path, forward_only=True))
    scorer = EngineTeacherScorer(teacher, pad_id=tiny_tokenizer.pad_token_id)
    short = encode_messages(tiny_tokenizer, [{"role": "user", "content": "What is 6 times 7?"}])
    long = encode_messages(
        tiny_tokenizer,
        [
            {"role": "system", "content": "You are the tester. Write test cases with input and expected output."},
            {"role": "user", "content": "Problem: sum the values.\n\n[Privileged feedback] The coder should revise."},
        ],
    )
    response = tiny_tokenizer.encode("The answer is 42.", add_special_tokens=False)
    requests = [ScoreRequest(short, response), ScoreRequest(long, response), ScoreRequest(long, response[:3])]
    assert len(long) > len(short) + 10

    scores = await scorer.score(requests)

    model = AutoModelForCausalLM.from_pretrained(tiny_teacher_path, attn_implementation="sdpa")
    for request, got in zip(requests, scores, strict=True):
        assert len(got) == len(request.response_ids)
        torch.testing.assert_close(
            torch.tensor(got), torch.tensor(transformers_response_log_probs(model, request)), atol=1e-4, rtol=0
        )
    # the same response after another context gets other teacher scores
    assert max(abs(a - b) for a, b in zip(scores[0], scores[1])) > 1e-3
