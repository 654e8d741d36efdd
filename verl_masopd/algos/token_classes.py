"""Token classes of a response, for the diagnostics (diagnostics.py): which tokens state the reply's
decision, which its format, which a program and which its content.

Classes (TOKEN_CLASSES; batch["token_class"] holds the index, −1 after the response's end):
    decision  a leading `hold` or `revise` (any case), the blanks before it and after it up to
              its newline: the decision-first reply the prompts ask for after a disagreement
    format    `####` and the blanks after it; every code-fence line (```` ```python ````,
              ```` ```input ````, ```` ```output ````, the closing ```` ``` ````) with its newline,
              fences read line by line as the workflows' parser reads them (workflows/parsing.py);
              special tokens (the end of turn)
    program   the lines inside a ```` ```python ```` block (tags PYTHON_TAGS)
    content   everything else: the answer after `####`, a test's input and output, prose

The text is the concatenation of the tokens' pieces, piece(t) = tokenizer.decode([t]) ("" for a
special token), and a token's offset the length of the pieces before it. A token takes the class
of its first non-blank character (an all-blank token: of its first character; a token with no
character: of the next one, content at the end).

The rules are the same for every workflow and prompt style. They fit the tiny world's compact
replies exactly (`hold` / `revise`, then `#### n` or one fenced block); in the paper's replies
the reasoning before `#### <answer>` is content, and only a reply that starts with the word has
decision tokens.
"""

from __future__ import annotations

import re

import numpy as np
import torch

from verl_masopd.workflows.base import HOLD, REVISE
from verl_masopd.workflows.parsing import FENCE_OPEN, PYTHON_TAGS

TOKEN_CLASSES = ("decision", "format", "program", "content")
DECISION, FORMAT, PROGRAM, CONTENT = range(len(TOKEN_CLASSES))
PADDING = -1

_DECISION = re.compile(rf"\s*(?:{HOLD}|{REVISE})\b[ \t]*\n?", re.IGNORECASE)
_ANSWER_MARK = re.compile(r"####[ \t]*")


def char_classes(text: str) -> np.ndarray:
    """The class of every character of `text` (int8 [len(text)]), by the rules above."""
    labels = np.full(len(text), CONTENT, dtype=np.int8)
    outside: list[tuple[int, int]] = []  # the lines outside any fenced block
    tag: str | None = None
    start = 0
    for line in text.split("\n"):
        end = min(start + len(line) + 1, len(text))
        if tag is None:
            opening = FENCE_OPEN.match(line)
            if opening:
                tag = opening.group(1).lower()
                labels[start:end] = FORMAT
            else:
                outside.append((start, end))
        elif line.strip() == "```":
            tag = None
            labels[start:end] = FORMAT
        elif tag in PYTHON_TAGS:
            labels[start:end] = PROGRAM
        start = end
    for line_start, line_end in outside:
        for mark in _ANSWER_MARK.finditer(text, line_start, line_end):
            labels[mark.start() : mark.end()] = FORMAT
    decision = _DECISION.match(text)  # blanks and a word: no fence line, so outside every block
    if decision:
        labels[: decision.end()] = DECISION
    return labels


class TokenClassifier:
    """The classes of responses' tokens under one tokenizer; each token id's piece is decoded once."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.special = frozenset(tokenizer.all_special_ids)
        self._pieces: dict[int, tuple[str, int]] = {}

    def _piece(self, token_id: int) -> tuple[str, int]:
        """(piece, offset of its first non-blank character: 0 when it has none)."""
        if token_id not in self._pieces:
            piece = "" if token_id in self.special else self.tokenizer.decode([token_id])
            blank = len(piece) - len(piece.lstrip())
            self._pieces[token_id] = (piece, blank if blank < len(piece) else 0)
        return self._pieces[token_id]

    def classify(self, ids: list[int]) -> np.ndarray:
        """The class of every token of one response (int8 [len(ids)])."""
        if not ids:
            return np.zeros(0, dtype=np.int8)
        pieces, leads = zip(*(self._piece(i) for i in ids), strict=True)
        text = "".join(pieces)
        lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=len(ids))
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        labels = np.append(char_classes(text), np.int8(CONTENT))  # index len(text): no character left
        classes = labels[np.minimum(starts + np.asarray(leads), len(text))]
        classes[np.fromiter((i in self.special for i in ids), dtype=bool, count=len(ids))] = FORMAT
        return classes

    def batch(self, responses: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """[B, R] int8 for right-padded `responses` [B, R] with `lengths` [B] real tokens each: row b
        holds the classes of its first lengths[b] tokens, PADDING after them."""
        out = torch.full(responses.shape, PADDING, dtype=torch.int8)
        for b, length in enumerate(lengths.tolist()):
            out[b, :length] = torch.from_numpy(self.classify(responses[b, :length].tolist()))
        return out
