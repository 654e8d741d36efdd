"""Duplicate removal by problem text."""

from __future__ import annotations

import unicodedata


def normalised_text(statement: str) -> str:
    """The statement in NFKC form, case-folded, with every run of whitespace made one space."""
    return " ".join(unicodedata.normalize("NFKC", statement).casefold().split())


class SeenTexts:
    """Remembers normalised statements; `add` says whether the text is new."""

    def __init__(self):
        self._seen: set[str] = set()

    def add(self, statement: str) -> bool:
        key = normalised_text(statement)
        if key in self._seen:
            return False
        self._seen.add(key)
        return True
