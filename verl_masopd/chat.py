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
