"""A `GenerationBackend` over verl's rollout servers (vLLM on GPUs), through the server manager's client.

Each prompt is one `await client.generate(request_id, prompt_ids=..., sampling_params=...)`
call returning verl's `TokenOutput`; the calls of a batch run concurrently and the servers batch
them. Sampling parameters map to vLLM's: temperature, top_p, top_k, max_tokens, and
`logprobs: True`, under which verl returns each sampled token's log-prob (its rollout
`logprobs_mode`, default "processed_logprobs": the distribution after temperature and top-k/top-p,
as the HF backend), and `stop` with the sampling's stop strings (tool calls; vLLM truncates its
text at the string but returns the id of the token that completes it whole, as the HF backend
does; the tool loop cuts the segment at the string). The eos token is included in `token_ids` when
generated; "stop" vs "length" is read from whether the last token is an eos id, or with stop
strings whether the response ended before `max_tokens`. A seeded sampling (the rollout without a turn
barrier) gives prompt i of the call vLLM's per-request `seed` request_seed(weight version, sampling
seed, i).

Weights: verl streams them from the policy's engine workers to the servers through its
`CheckpointEngineManager`; `update_weights(state_dict, version)` triggers that sync for
`version` (the `state_dict` argument is not needed on this path) and every request sent after it
must come back with `extra_fields["global_steps"] >= version`: equal in lockstep; newer when the
policy synced while the request ran (the rollout beside the update, trainer/background_rollout.py,
where the multi-LoRA servers load an adapter between two decoding steps). A request that fails,
is aborted, comes back from older weights than those of its sending or malformed is returned as
finish_reason "failed" (the rollout manager retries it); it never fails the other requests of the
batch. A request the servers leave unanswered for `timeout_s` is not an answer but a hung server:
a TimeoutError naming the servers.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from verl_masopd.rollout.backend import Generation, SamplingParams, request_seed
from verl_masopd.rollout.records import FAILED, LENGTH, STOP

logger = logging.getLogger(__name__)


class VerlServerBackend:
    """`client`: verl's server-manager client (`LLMServerManager.get_client()`);
    `checkpoint_manager`: verl's `CheckpointEngineManager` for this policy (None: weights fixed);
    `servers`: the servers' names, for errors."""

    def __init__(
        self,
        client,
        eos_ids: list[int],
        *,
        checkpoint_manager=None,
        version: int | None = None,
        name: str = "policy",
        servers: str = "its servers",
        timeout_s: float = 600.0,
    ):
        if not eos_ids:
            raise ValueError("VerlServerBackend needs the tokenizer's eos ids")
        self.client = client
        self.eos_ids = set(eos_ids)
        self.checkpoint_manager = checkpoint_manager
        self.version = version
        self.name = name
        self.servers = servers
        self.timeout_s = timeout_s

    async def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Generation]:
        params = {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k,
            "max_tokens": sampling.max_new_tokens,
            "logprobs": True,
        }
        if sampling.stop:
            params["stop"] = list(sampling.stop)
        seeds = [
            None if sampling.seed is None else request_seed(self.version, sampling.seed, i) for i in range(len(prompts))
        ]
        return list(
            await asyncio.gather(
                *(
                    self._one(prompt, params | ({} if seed is None else {"seed": seed}))
                    for prompt, seed in zip(prompts, seeds)
                )
            )
        )

    def update_weights(self, state_dict: dict, version: int) -> None:
        """Sync the servers to the engine's weights of step `version`, then expect that version."""
        if self.checkpoint_manager is None:
            raise RuntimeError(f"{self.name}: no checkpoint manager, the servers' weights cannot be updated")
        self.checkpoint_manager.update_weights(version)
        self.version = version

    def sleep(self) -> None:
        """Free the servers' GPU memory before the policy update (verl's `sleep_replicas`)."""
        if self.checkpoint_manager is not None:
            self.checkpoint_manager.sleep_replicas()

    async def _one(self, prompt: list[int], params: dict) -> Generation:
        request_id = f"{self.name}-{uuid.uuid4().hex}"
        sent = self.version  # the weights synced when the request leaves: its answer is from these or newer
        try:
            out = await asyncio.wait_for(
                self.client.generate(request_id, prompt_ids=prompt, sampling_params=params), self.timeout_s
            )
        except asyncio.TimeoutError:
            raise TimeoutError(
                f"{self.name}: request {request_id} unanswered by {self.servers} within {self.timeout_s:g}s"
            ) from None
        except Exception as e:  # one request's failure must not fail the batch: the manager retries it
            logger.warning("%s: request %s failed: %r", self.name, request_id, e)
            return Generation([], [], FAILED)
        problem = self._problem(out, params["max_tokens"], sent)
        if problem is not None:
            logger.warning("%s: request %s unusable: %s", self.name, request_id, problem)
            return Generation([], [], FAILED)
        token_ids = list(out.token_ids)
        stopped = token_ids[-1] in self.eos_ids or ("stop" in params and len(token_ids) < params["max_tokens"])
        finish = STOP if stopped else LENGTH
        return Generation(token_ids, [float(x) for x in out.log_probs], finish)

    def _problem(self, out, max_tokens: int, sent: int | None) -> str | None:
        if out.stop_reason == "aborted":
            return "aborted"
        if not out.token_ids:
            return "empty response"
        if out.log_probs is None or len(out.log_probs) != len(out.token_ids):
            return "log-probs missing or not one per token"
        if len(out.token_ids) > max_tokens:
            return f"{len(out.token_ids)} tokens exceed max_tokens {max_tokens}"
        steps = (out.extra_fields or {}).get("global_steps")
        if sent is not None and (steps is None or steps < sent):
            return f"generated by weights of step {steps}, expected {sent} or newer"
        return None
