"""The GPU teacher scorer: verl's teacher servers (vLLM/SGLang) return prompt log-probs.

Each response is sent as one prompt seq = x_q + y with `max_tokens` 1 and `prompt_logprobs` 0;
row j of `extra_fields["prompt_logprobs"]` is [log p_T(seq[j+1] | seq[:j+1])] (the last row is a
dummy), so response token i is row |x_q| − 1 + i. `extra_fields["prompt_ids"]` names the token
each row scores and is checked against y, so a misaligned row can never pass silently.

Prefix cache: `TeacherScoring` sends the own-role pass and then the contrast pass, so under the
role_last layout the contrast prompts start with blocks (the observation and p_t) the server has
just computed. vLLM v1, however, does not read its prefix cache for a request that asks for
prompt_logprobs (SamplingParams.skip_reading_prefix_cache defaults to True then, because cached
positions get no prompt log-probs), so as sent here every pass is a full prefill.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from uuid import uuid4

from verl_masopd.teacher.scoring import ScoreRequest, response_rows

PROMPT_LOGPROB_SAMPLING = {"max_tokens": 1, "temperature": 1.0, "prompt_logprobs": 0, "detokenize": False}


class ServerTeacherScorer:
    """TeacherScorer over a verl LLM server client (`async generate(request_id, *, prompt_ids, sampling_params)`)."""

    def __init__(self, client):
        self.client = client

    async def score(self, requests: Sequence[ScoreRequest]) -> list[list[float]]:
        return list(await asyncio.gather(*(self._score_one(r) for r in requests)))

    async def _score_one(self, request: ScoreRequest) -> list[float]:
        output = await self.client.generate(
            uuid4().hex,
            prompt_ids=list(request.context_ids) + list(request.response_ids),
            sampling_params=dict(PROMPT_LOGPROB_SAMPLING),
        )
        n_context, n_response = len(request.context_ids), len(request.response_ids)
        log_probs = response_rows(output.extra_fields["prompt_logprobs"], n_context, n_response)
        token_ids = response_rows(output.extra_fields["prompt_ids"], n_context, n_response)
        scored = [int(row[0]) for row in token_ids]
        if scored != list(request.response_ids):
            raise RuntimeError(
                f"teacher server scored tokens {scored[:8]}... where the response has "
                f"{list(request.response_ids)[:8]}..."
            )
        return [float(row[0]) for row in log_probs]
