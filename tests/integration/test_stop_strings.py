"""Stop strings cut at the string with a real BPE tokenizer (SmolLM2's): the token that completes a
stop string can reach past it (`toget` completed by ` together`, `</calc>` by `>.`); both backends
return that token whole (vLLM truncates only its text), and the tool loop cuts the segment at the
string, so the tool, the context that follows and the response's ids hold exactly the text up to
and including the stop string."""

from __future__ import annotations

import asyncio

import pytest
from transformers import AutoTokenizer

from verl_masopd.rollout.backend import Generation, SamplingParams
from verl_masopd.rollout.hf_backend import HFBackend
from verl_masopd.rollout.records import STOP
from verl_masopd.rollout.tool_loop import ToolLoop, ToolRequest
from verl_masopd.tokens.chat import encode_messages
from verl_masopd.workflows.tools import Observation, Tool

pytestmark = pytest.mark.integration


class Recorder(Tool):
    """Records the reply it is called on; observes ` [seen]`."""

    name = "recorder"

    def __init__(self, stop: str):
        self.stop = (stop,)
        super().__init__()
        self.replies: list[str] = []

    def run(self, reply: str) -> Observation:
        self.replies.append(reply)
        return Observation(" [seen]")


class ServerLikeReplies:
    """A stand-in for a vLLM server: the segment's text is tokenized whole, and generation ends at
    the first token whose decoded prefix contains a stop string, that token kept (vLLM's token ids),
    else at eos."""

    def __init__(self, tokenizer, segments: list[str]):
        self.tokenizer, self.segments, self.calls = tokenizer, segments, 0

    async def __call__(self, triples):
        out = []
        for _, _, sampling in triples:
            ids = self.tokenizer.encode(
                self.segments[min(self.calls, len(self.segments) - 1)], add_special_tokens=False
            )
            self.calls += 1
            kept = next(
                (
                    i + 1
                    for i in range(len(ids))
                    if any(s in self.tokenizer.decode(ids[: i + 1]) for s in sampling.stop)
                ),
                None,
            )
            ids = ids[:kept] if kept else ids + [self.tokenizer.eos_token_id]
            out.append(Generation(ids, [-0.5] * len(ids), STOP))
        return out


def play(generate, tokenizer, tool, prompt, max_new_tokens=32):
    loop = ToolLoop(generate, tokenizer, SamplingParams(temperature=0, max_new_tokens=max_new_tokens))
    try:
        [response] = asyncio.run(loop.run([ToolRequest("solver", prompt, tool)]))
    finally:
        loop.close()
    return response


@pytest.fixture(scope="module")
def tokenizer(smollm2_path):
    return AutoTokenizer.from_pretrained(smollm2_path)


def test_a_closing_tag_that_ends_inside_a_token_is_cut_at_the_tag(tokenizer):
    assert [tokenizer.decode([i]) for i in tokenizer.encode("2+3</calc>.", add_special_tokens=False)][-1] == ">."
    tool = Recorder("</calc>")
    replies = ServerLikeReplies(tokenizer, ["So <calc>2+3</calc>. Then", " done"])
    response = play(replies, tokenizer, tool, [1, 2, 3])
    assert tool.replies == ["So <calc>2+3</calc>"]
    text = tokenizer.decode(response.token_ids)
    assert text == "So <calc>2+3</calc> [seen] done<|im_end|>"
    tag_end = len(tokenizer.encode("So <calc>2+3</calc", add_special_tokens=False))
    # '>' replaces the sampled '>.': the environment's token, like the observation's
    assert tokenizer.decode(response.token_ids[tag_end : tag_end + 1]) == ">"
    assert response.generated[: tag_end + 1] == [1] * tag_end + [0]
    assert response.log_probs[tag_end] == 0.0 and response.log_probs[tag_end - 1] == -0.5


def test_hf_backend_generation_is_cut_at_the_stop_string(smollm2_path, tokenizer):
    backend = HFBackend(smollm2_path)
    prompt = encode_messages(tokenizer, [{"role": "user", "content": "Repeat exactly: We go together to the park."}])
    [whole] = backend.generate_sync([prompt], SamplingParams(temperature=0, max_new_tokens=12, stop=("toget",)))
    assert [tokenizer.decode([i]) for i in whole.token_ids] == ["We", " go", " together"]  # the whole token

    async def generate(triples):
        return [(await backend.generate([p], s))[0] for _, p, s in triples]

    tool = Recorder("toget")
    response = play(generate, tokenizer, tool, prompt, max_new_tokens=12)
    assert tool.replies == ["We go toget"]
    assert tokenizer.decode(response.token_ids).startswith("We go toget [seen]")
    assert response.generated[:2] == [1, 1] and 0 in response.generated[2:4]
