"""Teacher log-probs land on the student's response positions, whatever the teacher context length;
the truncation rule keeps the response; C_r is the κ roles after r."""

import pytest
from verl.workers.rollout.replica import TokenOutput

from verl_masopd.serving.teacher_scorer import ServerTeacherScorer
from verl_masopd.teacher.scoring import ScoreRequest, contrast_roles, response_rows


def position_log_prob(position: int, token: int) -> float:
    """The stand-in teacher: log p(seq[j] | seq[:j]) = −(seq[j] + 0.5·j) / 100."""
    return -(token + 0.5 * position) / 100


class StandInTeacherServer:
    """Obeys the rules of verl 0.9.1's vLLM servers: prompt log-probs only when asked,
    rows for positions 1..n−1 plus a dummy last row, max_tokens respected, over-long prompts raise."""

    def __init__(self, max_model_len: int = 64, shift: int = 0):
        self.max_model_len = max_model_len
        self.shift = shift
        self.prompts = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        if len(prompt_ids) >= self.max_model_len:
            raise ValueError(f"prompt of {len(prompt_ids)} tokens exceeds max_model_len {self.max_model_len}")
        self.prompts.append(list(prompt_ids))
        extra = {}
        if sampling_params.get("prompt_logprobs") is not None:
            seq = prompt_ids
            rows = range(1 + self.shift, len(seq))
            extra["prompt_logprobs"] = [[position_log_prob(j, seq[j])] for j in rows] + [[0.0]] * (1 + self.shift)
            extra["prompt_ids"] = [[seq[j]] for j in rows] + [[0]] * (1 + self.shift)
        tokens = [7][: sampling_params["max_tokens"]]
        log_probs = [-1.0] * len(tokens) if sampling_params.get("logprobs") else None
        return TokenOutput(token_ids=tokens, log_probs=log_probs, stop_reason="completed", extra_fields=extra)


def test_response_rows_start_after_the_context():
    rows = [10, 11, 12, 13, 14, 15]
    assert response_rows(rows, context_len=3, response_len=2) == [12, 13]
    assert response_rows(rows, context_len=1, response_len=5) == [10, 11, 12, 13, 14]
    with pytest.raises(ValueError, match="cannot cover"):
        response_rows(rows, context_len=5, response_len=3)


async def test_server_scores_land_on_response_positions_for_short_and_long_contexts():
    server = StandInTeacherServer()
    scorer = ServerTeacherScorer(server)
    response = [10, 11]
    short, long = ScoreRequest([5, 6, 7], response), ScoreRequest([5, 6, 7, 8, 9, 4], response)
    scores = await scorer.score([short, long])
    # short context: tokens 10, 11 sit at positions 3, 4 → −(10+1.5)/100, −(11+2)/100
    assert scores[0] == pytest.approx([-0.115, -0.13])
    # long context: positions 6, 7 → −(10+3)/100, −(11+3.5)/100
    assert scores[1] == pytest.approx([-0.13, -0.145])
    assert server.prompts == [[5, 6, 7, 10, 11], [5, 6, 7, 8, 9, 4, 10, 11]]


async def test_server_scorer_refuses_rows_that_score_other_tokens():
    scorer = ServerTeacherScorer(StandInTeacherServer(shift=1))
    with pytest.raises(RuntimeError, match="scored tokens"):
        await scorer.score([ScoreRequest([5, 6, 7], [10, 11])])


def test_contrast_roles_follow_the_role_cyclically():
    assert contrast_roles("coder", ("coder", "tester"), 1) == ["tester"]
    assert contrast_roles("tester", ("coder", "tester"), 1) == ["coder"]
    assert contrast_roles("b", ("a", "b", "c"), 2) == ["c", "a"]
    assert contrast_roles("a", ("a", "b"), 0) == []
    with pytest.raises(ValueError, match="num_contrast_roles=2"):
        contrast_roles("coder", ("coder", "tester"), 2)
