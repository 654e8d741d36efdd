"""Start-up checks of the run's model folders beyond their presence: one tokenizer and one chat
convention for the students and the teacher.

Every folder (students, per-policy students, teachers) must
- have a chat template;
- name an eos token in its tokenizer that its generation config also names as eos (when the
  generation config names any); a converter that swapped bos and eos shows here;
- have a chat template that ends an assistant turn with an eos id: the first token it writes after
  an assistant message's content, whitespace aside, must be the tokenizer's eos or an eos of its
  `generation_config.json` (without one, the tokenizer's eos), the ids every backend stops at
  (`rollout/hf_backend.py`, vLLM and verl's servers: the tokenizer's eos and the generation
  config's). A template that closes the turn with `<|im_end|>` while the eos is `<|endoftext|>` (a
  base model's convention, and what converters write for many instruct models) would let every
  reply run to the length limit through its own end of turn; a template that closes it with plain
  text alone gives generation no token to stop at. Both are refused, naming what to set, rather
  than widening the backends' stop ids: the folder then says what the model is sampled with;
- have a pad id that no chat-formatted context contains, unless the pad id is an eos id.

The pad rule. Padding positions are masked everywhere in this project and in verl: the rollout,
the teacher's scoring and the update build attention and response masks from the lengths of the
sequences (`verl_masopd.tokens.layout`), never from `ids != pad`. What a pad id must never be is a
token the chat template emits other than eos (SmolLM2's converted tokenizer padded with
`<|im_start|>`): checkpoints then carry it as their pad, and transformers' `generate`, called
without an attention mask, infers one as `ids != pad` — masking every message header of the
context. transformers skips that inference when pad equals eos, which makes pad = eos (the common
Hugging Face convention, SmolLM2's own) safe: an eos inside a context is never taken for padding.
The probe conversation below stands for a chat-formatted context.

With a teacher, every other folder must also match it in
- the vocabulary (teacher log-probs are scored on the students' token ids);
- the token ids of the probe conversation rendered by each one's chat template
  (`verl_masopd.tokens.chat.encode_messages`, generation prompt included);
- the eos set (the tokenizer's eos and the generation config's).

Each failure is one ConfigError line starting with the folder's config key, naming the folders
and the difference.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from transformers import AutoTokenizer, GenerationConfig

from verl_masopd.options.errors import ConfigError, require
from verl_masopd.tokens.chat import encode_messages, turn_end

PROBE = [
    {"role": "system", "content": "You are the Reasoner. End with `#### <answer>`."},
    {"role": "user", "content": "## Problem\nWhat is 12 + 30?"},
    {"role": "assistant", "content": "12 + 30 = 42.\n#### 42"},
    {"role": "user", "content": "The tool printed 42. Check it."},
]


@dataclass(frozen=True)
class Conventions:
    """A folder's tokenizer facts the checks compare."""

    path: str
    tokenizer: object
    probe: tuple[int, ...]
    eos: frozenset[int]


def conventions(key: str, path: str) -> Conventions:
    """The folder's conventions after its own checks (chat template, eos, pad)."""
    tokenizer = AutoTokenizer.from_pretrained(path)
    require(
        bool(tokenizer.chat_template),
        key,
        f"the tokenizer at {path} has no chat template; contexts are rendered with the model's chat template",
    )
    eos = tokenizer.eos_token_id
    require(eos is not None, key, f"the tokenizer at {path} names no eos token")
    generation_eos = _generation_eos(path)
    require(
        not generation_eos or eos in generation_eos,
        key,
        f"the tokenizer at {path} says eos {_named(tokenizer, [eos])} but its generation config says "
        f"{_named(tokenizer, sorted(generation_eos))}; set the tokenizer's eos_token to the generation config's",
    )
    try:
        probe = tuple(encode_messages(tokenizer, PROBE))
    except ValueError as error:
        raise ConfigError(f"{key}: {error}") from None
    eos_set = frozenset({eos} | generation_eos)
    try:
        closing, text = turn_end(tokenizer)
    except ValueError as error:
        raise ConfigError(f"{key}: the chat template at {path} {error}") from None
    require(
        closing in eos_set or closing in tokenizer.added_tokens_decoder,
        key,
        f"the chat template at {path} ends an assistant turn with the text {text!r}, not a token, so generation "
        f"has nothing to stop at but eos {_named(tokenizer, sorted(eos_set))}; use a template that ends each "
        "assistant turn with the eos token",
    )
    require(
        closing in eos_set,
        key,
        f"the chat template at {path} ends an assistant turn with {_named(tokenizer, [closing])}, which is not "
        f"an eos id ({_named(tokenizer, sorted(eos_set))}), so replies run on past their end; set eos_token to "
        f"{tokenizer.convert_ids_to_tokens(closing)!r} in tokenizer_config.json"
        + (f" and eos_token_id to {closing} in generation_config.json" if generation_eos else ""),
    )
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    require(
        pad in eos_set or pad not in probe,
        key,
        f"the pad id of {path}, {_named(tokenizer, [pad])}, occurs in chat-formatted contexts (its chat template "
        f"emits it) and is not an eos id; use a pad token the template never emits, or eos",
    )
    return Conventions(path, tokenizer, probe, eos_set)


def check_model_conventions(folders: dict[str, str], teacher_key: str | None) -> None:
    """Check every folder ({config key: path}); with `teacher_key`, compare every other one with it."""
    found = {key: conventions(key, path) for key, path in folders.items()}
    if teacher_key is None:
        return
    teacher = found[teacher_key]
    vocabulary = teacher.tokenizer.get_vocab()
    for key, model in found.items():
        if key == teacher_key:
            continue
        require(
            model.tokenizer.get_vocab() == vocabulary,
            key,
            f"the tokenizer at {model.path} differs from the teacher's ({teacher.path}); "
            "teacher log-probs are scored on the students' token ids, so both must share one tokenizer",
        )
        require(model.probe == teacher.probe, key, _probe_difference(model, teacher))
        require(
            model.eos == teacher.eos,
            key,
            f"eos ids {_named(model.tokenizer, sorted(model.eos))} at {model.path}, but "
            f"{_named(teacher.tokenizer, sorted(teacher.eos))} at the teacher's {teacher.path}",
        )


def _probe_difference(model: Conventions, teacher: Conventions) -> str:
    at = len(os.path.commonprefix([model.probe, teacher.probe]))
    mine, theirs = (_named(c.tokenizer, list(c.probe[at : at + 3])) for c in (model, teacher))
    return (
        f"the chat template at {model.path} renders a probe conversation differently from the teacher's "
        f"({teacher.path}): from token {at}, {mine} against {theirs}"
    )


def _generation_eos(path: str) -> frozenset[int]:
    if not os.path.isfile(os.path.join(path, "generation_config.json")):
        return frozenset()
    eos = GenerationConfig.from_pretrained(path).eos_token_id
    return frozenset(int(i) for i in (eos if isinstance(eos, (list, tuple)) else [eos]) if i is not None)


def _named(tokenizer, ids: list[int]) -> str:
    """ids with their token strings, e.g. [1 '<|im_start|>']."""
    return "[" + ", ".join(f"{i} {tokenizer.convert_ids_to_tokens(i)!r}" for i in ids) + "]" if ids else "[] (end)"
