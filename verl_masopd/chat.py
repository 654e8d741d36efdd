"""The one way chat messages become token ids, shared by the students' rollouts and the teacher.

Qwen3 chat template in no-thinking mode with the generation prompt appended: the context u an
agent is sampled from, and every teacher context x_q, are encoded by this function so that the
student and teacher tokenizations of a response line up.
"""

from __future__ import annotations


def encode_messages(tokenizer, messages: list[dict]) -> list[int]:
    """Token ids of `messages` rendered with the chat template, ready for the assistant's reply."""
    ids = tokenizer.apply_chat_template(
        messages, tokenize=True, add_generation_prompt=True, enable_thinking=False, return_dict=False
    )
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return [int(i) for i in ids]


SYSTEM_MARK, USER_MARK = "<<system-probe>>", "<<user-probe>>"


def inserts_default_system(tokenizer) -> bool:
    """Whether the chat template puts a system message of its own before a conversation that starts
    with a user message (SmolLM2's, Qwen2.5's and Llama 3.1's do; Qwen3's does not).

    The template's system header is the text it renders before a system message's content; the
    template inserts a default one when a lone user message is rendered after that same header."""
    system = [{"role": "system", "content": SYSTEM_MARK}, {"role": "user", "content": USER_MARK}]
    with_system = _render(tokenizer, system)
    header = with_system[: with_system.index(SYSTEM_MARK)]
    user_only = _render(tokenizer, [{"role": "user", "content": USER_MARK}])
    return bool(header) and user_only[: user_only.index(USER_MARK)].startswith(header)


def _render(tokenizer, messages: list[dict]) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
