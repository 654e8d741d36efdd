"""Reading untrusted model output: usability checks, fenced blocks, and clipping for display.

Every function here returns a value or a reason; none raises on any string a model can emit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_RESPONSE_CHARS = 100_000
PYTHON_TAGS = ("python", "py", "python3")

FENCE_OPEN = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)")
_ALLOWED_CONTROL = frozenset("\t\n\r\x0b\x0c")


@dataclass(frozen=True)
class Block:
    """One fenced block: its language tag (lower case, "" when none), body, and whether it was closed."""

    tag: str
    body: str
    closed: bool


def unusable_reason(text) -> str | None:
    """Why `text` cannot be parsed at all (empty, not text, enormous, binary), or None."""
    if not isinstance(text, str):
        return f"output is not text ({type(text).__name__})"
    if not text.strip():
        return "empty output"
    if len(text) > MAX_RESPONSE_CHARS:
        return f"output too long ({len(text)} characters > {MAX_RESPONSE_CHARS})"
    bad = next((c for c in text if _is_binary(c)), None)
    if bad is not None:
        return f"binary output (control character {ord(bad):#04x})"
    return None


def fenced_blocks(text: str) -> list[Block]:
    """The ``` blocks of `text` in order; a block still open at the end is returned with closed=False."""
    blocks: list[Block] = []
    tag: str | None = None
    body: list[str] = []
    for line in text.split("\n"):
        if tag is None:
            opening = FENCE_OPEN.match(line)
            if opening:
                tag, body = opening.group(1).lower(), []
        elif line.strip() == "```":
            blocks.append(Block(tag, "\n".join(body), True))
            tag = None
        else:
            body.append(line)
    if tag is not None:
        blocks.append(Block(tag, "\n".join(body), False))
    return blocks


def last_block(text: str, tags: tuple[str, ...], allow_empty: bool = False) -> tuple[str | None, str | None]:
    """(body, None) for the last block tagged with one of `tags`, or (None, reason)."""
    reason = unusable_reason(text)
    if reason:
        return None, reason
    fence = f"```{tags[0]}"
    blocks = [b for b in fenced_blocks(text) if b.tag in tags]
    if not blocks:
        return None, f"no {fence} block"
    last = blocks[-1]
    if not last.closed:
        return None, f"truncated output: the last {fence} block is never closed"
    if not allow_empty and not last.body.strip():
        return None, f"empty {fence} block"
    return last.body, None


def shown(text: str, limit: int) -> str:
    """`text` made safe to place in a prompt: control characters replaced, clipped to `limit` characters."""
    clean = "".join("?" if _is_binary(c) else c for c in text[: limit + 1])
    if len(text) <= limit:
        return clean
    return f"{clean[:limit]}\n... [{len(text) - limit} more characters]"


def _is_binary(c: str) -> bool:
    code = ord(c)
    return (code < 32 and c not in _ALLOWED_CONTROL) or code == 0x7F or 0xD800 <= code <= 0xDFFF
