"""How an answer is checked against a problem's reference answer y*, per problem.

A dataset that grades answers its own way states it in the row's metadata (`answer_rule`); every
other problem keeps math-verify's reading, where "1, 2" is the set {1, 2}.

    items     "set"       the whole answer against y* with math-verify (default)
              "ordered"   y* and the answer split at top-level commas (outside (), [], {}):
                          as many items, item i against item i
              "multiset"  as many items, paired one to one in any order
    tolerance numeric items a, g (plain decimals) also match when |a − g| ≤ 1.01 · tolerance,
              the slack of OlympiadBench's judge; other items compare with math-verify

OlympiadBench (data_prep/olympiadbench.py) sets "multiset" for problems with several answers,
"ordered" for the others (a tuple or a "w, d, a, b" list answers in order), and its `error`.
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_masopd.verify.equivalence import math_equal

ITEMS = ("set", "ordered", "multiset")
_OPEN, _CLOSE = "([{", ")]}"


@dataclass(frozen=True)
class AnswerRule:
    items: str = "set"
    tolerance: float | None = None

    def __post_init__(self):
        if self.items not in ITEMS:
            raise ValueError(f"answer_rule.items must be one of {ITEMS}, got {self.items!r}")
        if self.tolerance is not None and not self.tolerance >= 0:
            raise ValueError(f"answer_rule.tolerance must be >= 0, got {self.tolerance!r}")

    @classmethod
    def from_metadata(cls, metadata: dict) -> AnswerRule:
        """The rule in `metadata["answer_rule"]` ({"items": ..., "tolerance": ...}); the default without one."""
        rule = metadata.get("answer_rule") or {}
        if not isinstance(rule, dict) or set(rule) - {"items", "tolerance"}:
            raise ValueError(f"answer_rule must be an object with 'items' and 'tolerance', got {rule!r}")
        tolerance = rule.get("tolerance")
        return cls(rule.get("items", "set"), None if tolerance is None else float(tolerance))


def split_items(text: str) -> list[str]:
    """`text` split at the commas outside any bracket, each item stripped."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in _OPEN:
            depth += 1
        elif char in _CLOSE:
            depth -= 1
        elif char == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    items.append(text[start:].strip())
    return items


def _number(text: str) -> float | None:
    try:
        return float(text.strip().strip("$"))
    except ValueError:
        return None


def _item_equal(answer: str, gold: str, tolerance: float | None) -> bool:
    if tolerance is not None:
        a, g = _number(answer), _number(gold)
        if a is not None and g is not None:
            return abs(a - g) <= 1.01 * tolerance
    return math_equal(answer, gold)


def answer_matches(answer: str, gold: str, rule: AnswerRule) -> bool:
    """Whether `answer` is y* = `gold` under `rule` (module doc)."""
    if rule.items == "set":
        return _item_equal(answer, gold, rule.tolerance)
    answers, golds = split_items(answer), split_items(gold)
    if len(answers) != len(golds):
        return False
    if rule.items == "ordered":
        return all(_item_equal(a, g, rule.tolerance) for a, g in zip(answers, golds, strict=True))
    for g in golds:
        match = next((i for i, a in enumerate(answers) if _item_equal(a, g, rule.tolerance)), None)
        if match is None:
            return False
        answers.pop(match)
    return True
