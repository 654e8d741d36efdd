"""The GPU teacher scorer: verl's teacher servers (vLLM/SGLang) return prompt log-probs.

Each response is sent as one prompt seq = x_q + y with `max_tokens` 1 and `prompt_logprobs` 0;
row j of `extra_fields["prompt_logprobs"]` is [log p_T(seq[j+1] | seq[:j+1])] (the last row is a
dummy), so response token i is row |x_q| − 1 + i. `extra_fields["prompt_ids"]` names the token
each row scores and is checked against y, so a misaligned row can never pass silently.

Prefix cache: `TeacherScoring` sends the own-role pass and then the contrast pass, so under the
role_last layout the contrast prompts start with blocks (the observation and p_t) the server has
just computed. vLLM skips reading its prefix cache for a request that asks for prompt log-probs
(`SamplingParams.skip_reading_prefix_cache` defaults to True then), because the rows of cached
tokens are not computed. Only the response rows are needed here, so with `read_prefix_cache`
the scorer asks vLLM to read the cache anyway: the contrast pass then reuses the prefill of the
prefix x_r shares with x_q. The server reports the cached tokens c of each request; the rows
from c on are computed, so the response rows are valid when c ≤ |x_q| − 1, and a request whose
cache hit reaches into its response (the same x_q + y scored twice) is scored again without
reading the cache. `prompt_tokens` / `cached_tokens` count what the server was sent and reused;
`computed_tokens` what it computed for the last `score` call (sent − reused).

Top k (`score_topk`, the top-k distillation modes): a second request per response with
`prompt_logprobs` k, whose rows list the k most likely tokens by rank (verl's
`extract_prompt_logprobs` keeps the top k and drops the prompt's own token when it lies outside
them, so the sampled token's log-prob comes from the first request). The top-k request does not
read the prefix cache: vLLM leaves the rows of cached tokens uncomputed, and verl's extraction
reads the ranks of every row, which on such rows are not ranks at all. vLLM refuses k above its
engine's `max_logprobs` (20 by default); the teacher's servers are started with `max_logprobs` =
k (`serving.plans.plan_teacher_serving`).

What makes the contrast pass hit: `workflow.context_layout=role_last` (the role condition after the
observation and p_t, so x_q and x_r share them as a token prefix); vLLM's prefix caching on
(`actor_rollout_ref.rollout.enable_prefix_caching`, verl's default); the passes in this order, the
contrast pass after the own-role pass has been computed; and a shared prefix of at least one KV
block (vLLM caches whole blocks: 16 tokens on GPUs by default, 128 on the CPU build), of which the
whole blocks inside the shared prefix are reused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from uuid import uuid4

from verl_masopd.teacher.scoring import ScoreRequest, TopKScores, response_rows

PROMPT_LOGPROB_SAMPLING = {"max_tokens": 1, "temperature": 1.0, "prompt_logprobs": 0, "detokenize": False}
TIMEOUT_S = 600.0


class ServerTeacherScorer:
    """TeacherScorer over a verl LLM server client (`async generate(request_id, *, prompt_ids, sampling_params)`).

    read_prefix_cache: let vLLM reuse cached prefixes (vLLM servers only; SGLang's sampling
    parameters do not know the key). timeout_s: a request unanswered this long is an error naming `name`.
    """

    def __init__(self, client, *, read_prefix_cache: bool = True, timeout_s: float = TIMEOUT_S, name: str = "teacher"):
        self.client = client
        self.read_prefix_cache = read_prefix_cache
        self.timeout_s = timeout_s
        self.name = name
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.computed_tokens = 0

    async def score(self, requests: Sequence[ScoreRequest]) -> list[list[float]]:
        return await self._counted(self._score_one(r) for r in requests)

    async def score_topk(self, requests: Sequence[ScoreRequest], k: int) -> list[TopKScores]:
        return await self._counted(self._score_topk_one(r, k) for r in requests)

    async def _counted(self, calls) -> list:
        sent, cached = self.prompt_tokens, self.cached_tokens
        scores = list(await asyncio.gather(*calls))
        self.computed_tokens = (self.prompt_tokens - sent) - (self.cached_tokens - cached)
        return scores

    async def _score_one(self, request: ScoreRequest) -> list[float]:
        ids, log_probs = await self._response_rows(request, 0)
        scored = [row[0] for row in ids]
        if scored != list(request.response_ids):
            raise RuntimeError(
                f"teacher server scored tokens {scored[:8]}... where the response has "
                f"{list(request.response_ids)[:8]}..."
            )
        return [row[0] for row in log_probs]

    async def _score_topk_one(self, request: ScoreRequest, k: int) -> TopKScores:
        """The sampled token's log-prob (a second request: with prompt_logprobs k, verl keeps the
        top k only, and y_i may lie outside them) and the top k of every response row."""
        sampled, (ids, log_probs) = await asyncio.gather(self._score_one(request), self._response_rows(request, k))
        if any(len(row) != k or None in row for row in ids):
            raise RuntimeError(f"{self.name} server returned fewer than the top {k} log-probs of a row")
        return TopKScores(sampled, ids, log_probs)

    async def _response_rows(self, request: ScoreRequest, k: int) -> tuple[list[list[int]], list[list[float]]]:
        """Token ids and log-probs of the response rows with prompt_logprobs k (k = 0: the prompt's
        own tokens), computed rows only: a cache hit reaching into the response is asked again
        without the cache; a top-k request never reads the cache (module doc)."""
        read_cache = self.read_prefix_cache and not k
        output = await self._request(request, read_cache, k)
        if read_cache and self._cached(output) > len(request.context_ids) - 1:
            output = await self._request(request, False, k)
        n_context, n_response = len(request.context_ids), len(request.response_ids)
        ids = response_rows(output.extra_fields["prompt_ids"], n_context, n_response)
        log_probs = response_rows(output.extra_fields["prompt_logprobs"], n_context, n_response)
        return [[None if i is None else int(i) for i in row] for row in ids], [
            [float(x) for x in row] for row in log_probs
        ]

    async def _request(self, request: ScoreRequest, read_cache: bool, k: int = 0):
        sampling = dict(PROMPT_LOGPROB_SAMPLING, prompt_logprobs=k)
        if self.read_prefix_cache:
            sampling["skip_reading_prefix_cache"] = not read_cache
        prompt = list(request.context_ids) + list(request.response_ids)
        try:
            output = await asyncio.wait_for(
                self.client.generate(uuid4().hex, prompt_ids=prompt, sampling_params=sampling), self.timeout_s
            )
        except asyncio.TimeoutError:
            raise TimeoutError(f"{self.name} server: no prompt log-probs within {self.timeout_s:g}s") from None
        self.prompt_tokens += len(prompt)
        self.cached_tokens += self._cached(output)
        return output

    @staticmethod
    def _cached(output) -> int:
        return int((output.extra_fields or {}).get("num_cached_tokens") or 0)
