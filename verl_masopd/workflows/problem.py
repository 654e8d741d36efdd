"""A problem as the workflows see it, read from one row of the project's parquet schema.

Row schema (written by `data_prep`, documented in data_prep/README.md):
  data_source: str, prompt: [{"role": "user", "content": statement}], ability: "code" | "math" | "qa",
  reward_model: {"style": "rule", "ground_truth": str}
      math: the reference answer; code: JSON {"inputs": [str], "outputs": [str]} (golden tests);
      qa: a JSON list of the golden answers, any of which is correct
  extra_info: {"index": int, "id": str, "split": str, "problem": str,
               "public_tests": JSON like ground_truth or "", "reference_solution": str or "",
               "fn_name": str or "" (call-based problems), "metadata": JSON object}
Call-based tests (`fn_name` set) hold a JSON list of arguments as input and the JSON-encoded
return value as output. A math row's `metadata.answer_rule` says how answers are checked against
its reference answer (verl_masopd/verify/answer_rule.py; math-verify's reading without one).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from verl_masopd.verify.answer_rule import AnswerRule

CODE, MATH, QA = "code", "math", "qa"
DOMAINS = (CODE, MATH, QA)


@dataclass(frozen=True)
class TestCase:
    input: str
    output: str


@dataclass(frozen=True)
class Problem:
    uid: str
    domain: str
    statement: str
    answer: str | None = None
    answers: tuple[str, ...] = ()
    tests: tuple[TestCase, ...] = ()
    public_tests: tuple[TestCase, ...] = ()
    reference_solution: str | None = None
    fn_name: str | None = None
    data_source: str = ""
    answer_rule: AnswerRule = field(default_factory=AnswerRule)

    @classmethod
    def from_row(cls, row: dict) -> Problem:
        """Build a Problem from a parquet row; raises ValueError naming the missing or bad field."""
        extra = row.get("extra_info") or {}
        uid = str(extra.get("id") or extra.get("index", "?"))
        domain = row.get("ability")
        if domain not in DOMAINS:
            raise ValueError(f"row {uid}: field 'ability' must be 'code', 'math' or 'qa', got {domain!r}")
        statement = extra.get("problem") or _statement_from_prompt(row.get("prompt"))
        if not statement:
            raise ValueError(f"row {uid}: no problem text in 'extra_info.problem' or 'prompt'")
        truth = (row.get("reward_model") or {}).get("ground_truth")
        if truth is None or truth == "":
            raise ValueError(f"row {uid}: field 'reward_model.ground_truth' is missing")
        common = dict(
            uid=uid,
            domain=domain,
            statement=statement,
            reference_solution=extra.get("reference_solution") or None,
            fn_name=extra.get("fn_name") or None,
            data_source=str(row.get("data_source", "")),
        )
        if domain == MATH:
            return cls(answer=str(truth), answer_rule=_answer_rule(extra.get("metadata"), uid), **common)
        if domain == QA:
            return cls(answers=parse_answers(truth, f"row {uid}: reward_model.ground_truth"), **common)
        tests = parse_tests(truth, f"row {uid}: reward_model.ground_truth")
        if not tests:
            raise ValueError(f"row {uid}: code problem without golden tests")
        public = parse_tests(extra.get("public_tests") or "", f"row {uid}: extra_info.public_tests")
        return cls(tests=tests, public_tests=public, **common)


def encode_tests(tests: list[TestCase] | tuple[TestCase, ...]) -> str:
    return json.dumps({"inputs": [t.input for t in tests], "outputs": [t.output for t in tests]})


def parse_tests(text: str, where: str) -> tuple[TestCase, ...]:
    if not text:
        return ()
    try:
        obj = json.loads(text)
        inputs, outputs = obj["inputs"], obj["outputs"]
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"{where}: expected JSON {{'inputs': [...], 'outputs': [...]}} ({e})") from None
    if len(inputs) != len(outputs):
        raise ValueError(f"{where}: {len(inputs)} inputs but {len(outputs)} outputs")
    return tuple(TestCase(str(i), str(o)) for i, o in zip(inputs, outputs, strict=True))


def encode_answers(answers: list[str] | tuple[str, ...]) -> str:
    return json.dumps(list(answers), ensure_ascii=False)


def parse_answers(text: str, where: str) -> tuple[str, ...]:
    """The golden answers of a qa row: a non-empty JSON list of non-blank strings."""
    try:
        answers = json.loads(text)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{where}: expected a JSON list of golden answers ({e})") from None
    if not isinstance(answers, list) or not answers:
        raise ValueError(f"{where}: expected a non-empty JSON list of golden answers")
    if not all(isinstance(a, str) and a.strip() for a in answers):
        raise ValueError(f"{where}: every golden answer must be a non-blank string")
    return tuple(answers)


def _answer_rule(metadata, uid: str) -> AnswerRule:
    try:
        fields = json.loads(metadata) if isinstance(metadata, str) and metadata else metadata or {}
        if not isinstance(fields, dict):
            raise ValueError(f"expected a JSON object, got {type(fields).__name__}")
        return AnswerRule.from_metadata(fields)
    except (ValueError, TypeError) as e:
        raise ValueError(f"row {uid}: extra_info.metadata: {e}") from None


def _statement_from_prompt(prompt) -> str:
    if prompt is None:
        return ""
    return "\n".join(str(m.get("content", "")) for m in prompt if m.get("role") == "user")
