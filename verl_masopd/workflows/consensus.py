"""Majority choice among the agents of one role (n > 1), used for the submission."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def majority(candidates: list[tuple[str, T]], same: Callable[[T, T], bool]) -> str | None:
    """The agent whose value the most agents share; None when there are no candidates.

    `candidates` are (agent name, value) in agent-index order. Classes are formed greedily in
    that order, each value joining the first class whose first value it is `same` as. The
    largest class wins, ties go to the class whose first member has the lowest index, and the
    class's first member is returned.
    """
    classes: list[tuple[T, list[str]]] = []
    for name, value in candidates:
        home = next((members for first, members in classes if same(first, value)), None)
        if home is None:
            classes.append((value, [name]))
        else:
            home.append(name)
    if not classes:
        return None
    return max(classes, key=lambda c: len(c[1]))[1][0]
