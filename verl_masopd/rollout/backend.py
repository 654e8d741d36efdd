"""The generation backend protocol: batched token-id prompts in, token ids and log-probs out.

Generation stops at the tokenizer's eos (or pad) token, after `max_new_tokens`, or at the first
token whose text completes one of the `stop` strings (a tool call, workflows/tools.py; that token
is kept, finish_reason "stop"); a generated eos token is included in `token_ids` with its
log-prob, as verl does.

`SamplingParams.seed` None is a call's sampling as the backend seeds it (the lockstep rollout);
a seed makes the sampling of each prompt of the call depend only on (backend seed, weight
version, request seed, the prompt's index in the call), whichever other requests share the
engine: the rollout without a turn barrier seeds every request (`request_seed`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class SamplingParams:
    """top_k = -1 means no top-k filtering; top_p = 1.0 means no nucleus filtering; `stop`: the
    strings that end a generation (none by default); `seed`: the request's own sampling seed
    (None: the backend's per-call seeding)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_new_tokens: int = 256
    stop: tuple[str, ...] = ()
    seed: int | None = None

    @property
    def truncates(self) -> bool:
        """Top-k or top-p leave tokens out of the distribution sampled from."""
        return self.top_p < 1.0 or self.top_k > 0

    @property
    def log_prob_temperature(self) -> float:
        """T of the distribution softmax(z / T) the recorded log-probs are taken from: the sampling
        temperature, or 1 under greedy decoding (T = 0), whose log-probs are of the unscaled logits."""
        return self.temperature if self.temperature > 0 else 1.0


def request_seed(*parts) -> int:
    """A 63-bit seed from `parts` (their text joined by "/"): the first 8 bytes of its SHA-256."""
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


@dataclass
class Generation:
    """One sampled response: `finish_reason` is "stop" (eos generated) or "length"; `version`: the
    policy's weight version when the request was sent (the rollout manager stamps it), never newer
    than the weights that sampled any of its tokens."""

    token_ids: list[int]
    log_probs: list[float]
    finish_reason: str
    version: int = 0


class GenerationBackend(Protocol):
    async def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Generation]:
        """One `Generation` per prompt, in order."""

    def update_weights(self, state_dict: dict, version: int) -> None:
        """Replace the model's weights by `state_dict`; later generations use them."""
