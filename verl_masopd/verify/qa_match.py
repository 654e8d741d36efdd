"""Short answers against golden answers, as the open-domain QA benchmarks score them.

`normalize_answer` is SQuAD's normalisation, the one Search-R1's reward and FlashRAG's metrics
use: lower-case, delete ASCII punctuation (`string.punctuation`), delete the words a/an/the,
collapse whitespace. A prediction is correct when it matches ANY golden answer:

- `exact_match`: the normalised prediction equals a normalised gold (Search-R1's `em`).
- `sub_exact_match`: a normalised gold occurs in the normalised prediction (Search-R1's
  `subem`). Containment is by characters, as there: the gold "1" is in "1990".
- `relaxed_match`: exact match, or equality after a wider normalisation that reads the same
  answer written differently: Unicode NFKD with accents dropped ("Röntgen" = "Rontgen",
  "ﬁ" = "fi"), case folded ("ß" = "ss"), every Unicode punctuation character deleted, not
  only the ASCII ones (curly quotes, dashes: "O’Brien" = "O'Brien"), and the number words
  zero to twenty read as digits ("two" = "2", "twelve" = "12"). Nothing else: no partial
  credit and no synonyms, so it stays an exact-match score a reader can reproduce.

Plain exact match keeps those apart: "two" ≠ "2", "Röntgen" ≠ "Rontgen", "O’Brien" ≠
"O'Brien" (the curly quote is not in `string.punctuation`).

Golden answers may come as a string, any iterable of strings (list, tuple, numpy array), a
string holding a JSON list (PopQA's `possible_answers`), or Search-R1's ground truth
`{"target": [...]}`; other items are read with `str`, None is skipped. Predictions are
untrusted model output: None, numbers, huge or odd Unicode strings never raise (None matches
nothing). A prediction or gold that normalises to the empty string ("", "The", "?") never
matches; Search-R1 would count an empty prediction equal to such a gold, and its `subem`
would find such a gold in every prediction.
"""

from __future__ import annotations

import json
import re
import string
import unicodedata
from collections.abc import Callable, Iterable, Mapping

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_ASCII_PUNCTUATION = str.maketrans("", "", string.punctuation)
_NUMBER_WORDS = {
    word: str(value)
    for value, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen"
        " sixteen seventeen eighteen nineteen twenty".split()
    )
}

MODES = ("em", "subem", "relaxed")


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower-case, no ASCII punctuation, no articles, single spaces."""
    text = text.lower().translate(_ASCII_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def relaxed_normalize(text: str) -> str:
    """`normalize_answer` after case folding, NFKD without accents and deleting all Unicode
    punctuation, with the number words zero to twenty as digits."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    kept = "".join(
        ch for ch in decomposed if not unicodedata.combining(ch) and not unicodedata.category(ch).startswith("P")
    )
    return " ".join(_NUMBER_WORDS.get(word, word) for word in normalize_answer(kept).split())


def golden_answers(golds) -> list[str]:
    """The golden answers as a flat list of strings, from any of the forms the module doc lists."""
    if golds is None:
        return []
    if isinstance(golds, bytes):
        golds = golds.decode("utf-8", errors="replace")
    if isinstance(golds, str):
        listed = _json_list(golds)
        return [str(golds)] if listed is None else golden_answers(listed)
    if isinstance(golds, Mapping):
        return golden_answers(golds.get("target"))
    if not isinstance(golds, Iterable):
        return [str(golds)]
    try:
        items = list(golds)
    except TypeError:  # a 0-d numpy array is Iterable but cannot be iterated
        return [str(golds)]
    return [answer for item in items for answer in golden_answers(item)]


def exact_match(prediction, golds) -> bool:
    """Whether the normalised prediction equals a normalised golden answer."""
    return _matches(prediction, golds, normalize_answer, str.__eq__)


def sub_exact_match(prediction, golds) -> bool:
    """Whether a normalised golden answer occurs in the normalised prediction."""
    return _matches(prediction, golds, normalize_answer, lambda predicted, gold: gold in predicted)


def relaxed_match(prediction, golds) -> bool:
    """Exact match, or equality under `relaxed_normalize`."""
    return exact_match(prediction, golds) or _matches(prediction, golds, relaxed_normalize, str.__eq__)


def answer_matches(prediction, golds, mode: str = "em") -> bool:
    """The check named by `mode`: "em", "subem" or "relaxed"."""
    checks = {"em": exact_match, "subem": sub_exact_match, "relaxed": relaxed_match}
    if mode not in checks:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    return checks[mode](prediction, golds)


def _matches(prediction, golds, normalize: Callable[[str], str], agree: Callable[[str, str], bool]) -> bool:
    if prediction is None:
        return False
    if isinstance(prediction, bytes):
        prediction = prediction.decode("utf-8", errors="replace")
    predicted = normalize(str(prediction))
    if not predicted:
        return False
    return any(gold and agree(predicted, gold) for gold in map(normalize, golden_answers(golds)))


def _json_list(text: str) -> list | None:
    if not text.lstrip().startswith("["):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, list) else None
