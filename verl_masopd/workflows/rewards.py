"""Role-local rewards of D.4 (docs/method.md, "Rewards"): r_{t,role} = b_{t,role} · Σ_k w_k · g_{k,t}.

Terms g are read from the evidence a workflow's `step` stores in `Turn.verifier["agents"]`:
  Coder     0.1·build + 0.1·run + 0.8·pass   build: compiles; run: the smoke subset of the golden
            tests runs without exception or timeout; pass: golden pass fraction.
            Mask: golden tests exist.
  Tester    0.2·valid + 0.8·spec             valid: well-formed, and the reference solution runs on
            the input with the same output twice (deterministic); spec: the reference reproduces
            the declared output. Mask: a reference exists.
  Reasoner  0.2·format + 0.8·answer          format: a '####' answer is present; answer: ≡ y*.
            Mask: y* exists.
  Tool-User 0.1·run + 0.1·parse + 0.8·answer run: the program finishes cleanly; parse: an answer
            is recovered from the output of a clean run (none from a failed one: docs/method.md,
            "Decisions on points the sources leave open"); answer: ≡ y*. Mask: y* exists.
A missing output (no program, no answer) is evidence of failure and scores 0 with the mask on;
the mask is off only when the verifier's own resources are missing (then the value is 0).
Weights are configurable per role and term (`reward_weights`).
"""

from __future__ import annotations

from verl_masopd.workflows.base import Reward

DEFAULT_WEIGHTS: dict[str, dict[str, float]] = {
    "coder": {"build": 0.1, "run": 0.1, "pass": 0.8},
    "tester": {"valid": 0.2, "spec": 0.8},
    "reasoner": {"format": 0.2, "answer": 0.8},
    "tool_user": {"run": 0.1, "parse": 0.1, "answer": 0.8},
}


def resolve_weights(overrides: dict | None) -> dict[str, dict[str, float]]:
    """D.4 weights with `overrides` ({role: {term: weight}}) applied; unknown roles or terms fail."""
    weights = {role: dict(terms) for role, terms in DEFAULT_WEIGHTS.items()}
    for role, terms in (overrides or {}).items():
        if role not in weights:
            raise ValueError(f"workflow.reward_weights: unknown role {role!r} (known: {sorted(weights)})")
        for term, w in terms.items():
            if term not in weights[role]:
                raise ValueError(
                    f"workflow.reward_weights.{role}: unknown term {term!r} (known: {sorted(weights[role])})"
                )
            weights[role][term] = float(w)
    return weights


def local_reward(role: str, evidence: dict, weights: dict[str, dict[str, float]]) -> Reward:
    terms = _TERMS[role](evidence)
    if terms is None:
        return Reward(0.0, False, {})
    return Reward(sum(weights[role][k] * v for k, v in terms.items()), True, terms)


def _coder_terms(ev: dict) -> dict[str, float] | None:
    if ev["total"] == 0:
        return None
    return {"build": float(ev["build"]), "run": float(ev["run"]), "pass": ev["passed"] / ev["total"]}


def _tester_terms(ev: dict) -> dict[str, float] | None:
    if ev["spec"] is None:
        return None
    return {"valid": float(ev["valid"]), "spec": float(ev["spec"])}


def _reasoner_terms(ev: dict) -> dict[str, float] | None:
    if ev["correct"] is None:
        return None
    return {"format": float(ev["answer"] is not None), "answer": float(ev["correct"])}


def _tool_user_terms(ev: dict) -> dict[str, float] | None:
    if ev["correct"] is None:
        return None
    return {"run": float(ev["run"]), "parse": float(ev["answer"] is not None), "answer": float(ev["correct"])}


_TERMS = {"coder": _coder_terms, "tester": _tester_terms, "reasoner": _reasoner_terms, "tool_user": _tool_user_terms}
