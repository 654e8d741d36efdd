"""The one way text becomes token ids in a context, shared by the students' rollouts and the teacher.

Contexts are chat messages rendered with the tokenizer's chat template (Qwen3's in no-thinking
mode, generation prompt appended): the context u an agent is sampled from and every teacher
context x_q are encoded by `encode_messages`, so that the student and teacher tokenizations of a
response line up. Text appended inside a response (tool observations) is encoded by `encode_text`.

Control tokens (docs/untrusted-text.md). The tokenizer's added tokens are control tokens: its
special tokens (`<|im_start|>`, `<|im_end|>`, `<|endoftext|>`) and tags such as Qwen3's `<think>`,
`<tool_call>`, `<tool_response>`. Only the chat template writes them. Message contents and tool
observations are text: a control token's string inside them becomes the ordinary tokens of its
characters. A fast tokenizer alone cannot tell the two apart: it turns every occurrence of an added
token's string in the rendered chat into the token (`add_special_tokens=False` only leaves out
bos/eos; `split_special_tokens=True` splits the template's own special tokens too, and no tag that
is not a special token). So `encode_messages`:

  1. escapes each content: every control string c_i in it, and every escape character E (U+F0000),
     becomes E followed by the private-use character naming it, so no content holds a control string;
     then, where the tokenizer normalises text before it matches added tokens (a normalizer and an
     added token with `normalized: true`), every span of the content the tokenizer still encodes as
     a control token (a look-alike: `＜think＞` under NFKC, `<THINK>` under Lowercase) becomes, one
     character at a time, E followed by two characters of U+100000–U+1007FF holding its code point;
  2. renders the escaped messages with the template and encodes the result: every control token
     in it is the template's own;
  3. re-encodes each run of text between two control tokens that holds an escape, unescaped, with
     the tokenizer stripped of its added tokens (its normalizer, pre-tokenizer and model only).

Why step 1 leaves no look-alike: the escaped span holds only escape characters, which the normalizer
keeps as they are (checked when the tokenizer is read: a tokenizer whose normalizer changes them is
refused), and no control string contains them; any other match in the content overlapped a match the
tokenizer made (it matches leftmost-longest) and so lost a character to the escape.

A content without control strings, look-alikes (or E) is unchanged by step 1; when no content holds
one, the ids are the tokenizer's ids of the rendered chat, as `apply_chat_template(tokenize=True)`
gives them. The template's fixed text next to a content must not complete a control string begun in
the content, as written or normalised (true of ChatML templates: the text next to a content is whole
control tokens and role names). A message is a role and a string content: a list of parts, or any
other field, would reach the template unescaped, and is refused (ValueError).
"""

from __future__ import annotations

import json
import re
import weakref
from dataclasses import dataclass

from tokenizers import Tokenizer

ESCAPE = "\U000f0000"  # private use: E, then one private-use character naming the escaped string
CHARACTER = 0x100000  # E, then chr(CHARACTER + high 10 bits), chr(CHARACTER + low 11 bits): one character
CHARACTERS = f"[{chr(CHARACTER)}-{chr(CHARACTER + 0x7FF)}]"


@dataclass(frozen=True)
class _Controls:
    """A tokenizer's control strings, their escapes, the tokenizer without added tokens, and the
    tokenizer itself where it matches added tokens on normalised text (None elsewhere)."""

    added: int  # the number of added tokens when built: a tokenizer given more is read again
    ids: frozenset[int]
    pattern: re.Pattern  # a control string or E
    escapes: dict[str, str]  # control string or E → its escape
    originals: dict[str, str]  # naming character → control string or E
    text: Tokenizer
    normalising: Tokenizer | None

    def escape(self, text: str) -> str:
        escaped = self.pattern.sub(lambda m: self.escapes[m.group(0)], text)
        if self.normalising is None:
            return escaped
        encoded = self.normalising.encode(escaped, add_special_tokens=False)
        for begin, end in reversed([span for i, span in zip(encoded.ids, encoded.offsets) if i in self.ids]):
            escaped = escaped[:begin] + "".join(map(_character, escaped[begin:end])) + escaped[end:]
        return escaped

    def unescape(self, text: str) -> str:
        return re.sub(f"{ESCAPE}(?:({CHARACTERS})({CHARACTERS})|(.))", self._original, text, flags=re.DOTALL)

    def _original(self, m: re.Match) -> str:
        if m.group(1):
            return chr((ord(m.group(1)) - CHARACTER) << 11 | (ord(m.group(2)) - CHARACTER))
        return self.originals.get(m.group(3), m.group(0))

    def text_ids(self, text: str) -> list[int]:
        return self.text.encode(text, add_special_tokens=False).ids


def _character(c: str) -> str:
    return ESCAPE + chr(CHARACTER + (ord(c) >> 11)) + chr(CHARACTER + (ord(c) & 0x7FF))


_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def controls(tokenizer) -> _Controls:
    """The control strings of a fast tokenizer (its added tokens), read once per tokenizer.

    Raises ValueError for a tokenizer that is not a fast one, and for one that matches added tokens
    on normalised text with a normalizer that changes the escape characters."""
    decoder = tokenizer.added_tokens_decoder
    cached = _CACHE.get(tokenizer)
    if cached is not None and cached.added == len(decoder):
        return cached
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ValueError(f"{type(tokenizer).__name__} is not a fast tokenizer; the contexts need one")
    added = {token.content: i for i, token in decoder.items()}
    strings = [ESCAPE, *sorted(added, key=len, reverse=True)]
    names = [chr(0xF0000 + k) for k in range(len(strings))]  # E escapes itself as E E
    spec = json.loads(backend.to_str())
    spec.update(truncation=None, padding=None)
    normalising = None
    if backend.normalizer is not None and any(token.normalized for token in decoder.values()):
        kept = "".join(names) + "".join(chr(CHARACTER + k) for k in range(0x800))
        if kept not in backend.normalizer.normalize_str(f"a{kept}a"):
            raise ValueError(
                f"the normalizer of the tokenizer {tokenizer.name_or_path} changes private-use characters, "
                "so look-alikes of its added tokens (normalized: true) could not be escaped"
            )
        normalising = Tokenizer.from_str(json.dumps(spec))
    spec.update(added_tokens=[])
    found = _Controls(
        added=len(decoder),
        ids=frozenset(added.values()),
        pattern=re.compile("|".join(map(re.escape, strings))),
        escapes={s: ESCAPE + n for s, n in zip(strings, names, strict=True)},
        originals=dict(zip(names, strings, strict=True)),
        text=Tokenizer.from_str(json.dumps(spec)),
        normalising=normalising,
    )
    _CACHE[tokenizer] = found
    return found


def encode_messages(tokenizer, messages: list[dict]) -> list[int]:
    """Token ids of `messages` rendered with the chat template, ready for the assistant's reply; the
    contents are text (module docstring)."""
    found = controls(tokenizer)
    for m in messages:
        if set(m) != {"role", "content"} or not isinstance(m["content"], str):
            raise ValueError(
                f"a message is a role and a string content, not {sorted(m)} with content "
                f"{type(m.get('content')).__name__}: other fields and lists of parts reach the template unescaped"
            )
    escaped = [{"role": m["role"], "content": found.escape(m["content"])} for m in messages]
    rendered = tokenizer.apply_chat_template(escaped, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    if ESCAPE not in rendered:
        return [int(i) for i in tokenizer(rendered, add_special_tokens=False)["input_ids"]]
    encoded = tokenizer(rendered, add_special_tokens=False, return_offsets_mapping=True)
    ids: list[int] = []
    run: list[int] = []
    start = 0
    for token, (begin, end) in [*zip(encoded["input_ids"], encoded["offset_mapping"]), (None, (len(rendered), 0))]:
        if token is not None and token not in found.ids:
            run.append(int(token))
            continue
        chunk = rendered[start:begin]
        ids += found.text_ids(found.unescape(chunk)) if ESCAPE in chunk else run
        if token is not None:
            ids.append(int(token))
        run, start = [], end
    return ids


def encode_text(tokenizer, text: str) -> list[int]:
    """Token ids of `text` as text: no bos/eos, and no control token (where the tokenizer would make
    one of a control string or of a look-alike, the text is encoded without the added tokens)."""
    found = controls(tokenizer)
    ids = [int(i) for i in tokenizer.encode(text, add_special_tokens=False)]
    return found.text_ids(text) if found.ids.intersection(ids) else ids


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


TURN_MARK = "<<assistant-probe>>"
TURN_PROBE = [
    {"role": "system", "content": "<<system-probe>>"},
    {"role": "user", "content": "<<user-probe>>"},
    {"role": "assistant", "content": TURN_MARK},
    {"role": "user", "content": "<<user-probe>>"},
]


def turn_end(tokenizer) -> tuple[int | None, str]:
    """The token the chat template writes right after an assistant message's content (whitespace
    aside; None when it writes only text or nothing), and the text there: the token that ends an
    assistant turn, which generation must stop at. The assistant message is not the last one, since
    some templates (Qwen3's) render the last one differently. A template that does not write the
    content as given is a ValueError."""
    rendered = tokenizer.apply_chat_template(TURN_PROBE, tokenize=False, enable_thinking=False)
    _, mark, after = rendered.partition(TURN_MARK)
    if not mark:
        raise ValueError("does not write an assistant message's content as given")
    after = after.lstrip()
    ids = tokenizer(after, add_special_tokens=False)["input_ids"]
    return (int(ids[0]) if ids else None), after[:20]
