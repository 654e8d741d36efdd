"""The server scorer reads vLLM's prefix cache (vLLM skips it for prompt log-probs unless told) and
still returns only computed rows: a hit that reaches into the response is scored again without it."""

import math

from verl.workers.rollout.replica import TokenOutput

from verl_masopd.serving.teacher_scorer import ServerTeacherScorer
from verl_masopd.teacher.scoring import ScoreRequest

BLOCK = 2


def log_prob(position: int, token: int) -> float:
    return -(token + 0.5 * position) / 100


class CachingServer:
    """vLLM's rules for one request: full blocks of a prompt seen before are cached (never the
    last token); when the request reads the cache, rows of cached positions are not computed
    (garbage here); `num_cached_tokens` reports the hit."""

    def __init__(self):
        self.seen: list[list[int]] = []
        self.reads: list[bool] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        read = not sampling_params.get("skip_reading_prefix_cache", True)
        self.reads.append(read)
        cached = 0
        if read:
            for earlier in self.seen:
                common = next((i for i, (a, b) in enumerate(zip(earlier, prompt_ids)) if a != b), len(earlier))
                cached = max(cached, min(common, len(prompt_ids) - 1) // BLOCK * BLOCK)
        self.seen.append(list(prompt_ids))
        rows = range(1, len(prompt_ids))
        computed = [j - 1 >= cached for j in rows]
        extra = {
            "num_cached_tokens": cached,
            "prompt_logprobs": [[log_prob(j, prompt_ids[j]) if c else math.nan] for j, c in zip(rows, computed)]
            + [[0.0]],
            "prompt_ids": [[prompt_ids[j] if c else -1] for j, c in zip(rows, computed)] + [[0]],
        }
        return TokenOutput(token_ids=[7], log_probs=None, stop_reason="completed", extra_fields=extra)


async def test_contrast_contexts_reuse_the_shared_prefix_and_keep_exact_response_rows():
    server = CachingServer()
    scorer = ServerTeacherScorer(server)
    target = ScoreRequest([1, 2, 3, 4, 5, 6], [10, 11])
    contrast = ScoreRequest([1, 2, 3, 4, 8, 9], [10, 11])

    first = await scorer.score([target])
    assert scorer.computed_tokens == 8
    second = await scorer.score([contrast])
    assert scorer.computed_tokens == 8 - 4, "a call computes what it sent less what it read from the cache"

    assert first == [[log_prob(6, 10), log_prob(7, 11)]]
    assert second == [[log_prob(6, 10), log_prob(7, 11)]]
    assert (scorer.prompt_tokens, scorer.cached_tokens) == (16, 4), "the contrast pass reused 4 shared tokens"
    assert server.reads == [True, True]


async def test_a_hit_into_the_response_is_scored_again_without_the_cache():
    server = CachingServer()
    scorer = ServerTeacherScorer(server)
    request = ScoreRequest([1, 2, 3], [10, 11, 12])

    assert await scorer.score([request]) == await scorer.score([request])
    assert server.reads == [True, True, False], "the repeat hit 4 > |x_q| - 1 = 2 cached tokens, then re-scored"
    assert scorer.computed_tokens == (6 - 4) + 6, "the discarded call's uncached rows and the full re-score"


async def test_without_prefix_cache_reading_vllms_default_holds():
    server = CachingServer()
    scorer = ServerTeacherScorer(server, read_prefix_cache=False)
    await scorer.score([ScoreRequest([1, 2, 3, 4], [10])])
    await scorer.score([ScoreRequest([1, 2, 3, 4], [11])])
    assert server.reads == [False, False] and scorer.cached_tokens == 0
