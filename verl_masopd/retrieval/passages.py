"""Retrieved passages, the interface every retriever serves, and the observation a model reads.

A passage's `contents` is in the wiki-18 layout: a title line, then the passage text. The title
line is usually wrapped in double quotes ("Evan Morris") and sometimes bare (Absalon); one pair of
surrounding quotes is dropped. Observations are rendered the Search-R1 way, one line per passage:
`Doc 1(Title: Evan Morris) Evan Morris Evan L. Morris (January 26, 1977 ...`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Passage:
    """One retrieved passage; `score` is None when the server sent no scores."""

    id: str
    contents: str
    score: float | None = None

    @property
    def title(self) -> str:
        """The first line of `contents` without one pair of surrounding double quotes ("" when
        `contents` has no line break)."""
        if "\n" not in self.contents:
            return ""
        line = self.contents.split("\n", 1)[0].strip()
        if len(line) >= 2 and line[0] == line[-1] == '"':
            return line[1:-1]
        return line

    @property
    def text(self) -> str:
        """`contents` after the title line (all of it when there is no title line)."""
        return self.contents.split("\n", 1)[1] if "\n" in self.contents else self.contents


class Retriever(Protocol):
    """What the local index and the HTTP client both serve: for each query, its best passages,
    best first (at most `topk`, fewer when fewer match). Failures raise; `guard.GuardedRetriever`
    turns them into recorded outcomes."""

    def search(self, queries: list[str], topk: int) -> list[list[Passage]]: ...


def render_observation(passages: list[Passage]) -> str:
    """The passages as the model reads them: `Doc i(Title: t) text`, one line each, i from 1."""
    return "".join(f"Doc {number}(Title: {p.title}) {p.text}\n" for number, p in enumerate(passages, 1))
