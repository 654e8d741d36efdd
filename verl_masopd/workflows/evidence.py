"""An agent's verifier evidence at one turn, and the role-local reward of D.4 it yields.

Role-local reward (docs/method.md, "Rewards") of the agent at turn t:

    r_t = b_t · Σ_k w_k · g_{k,t}

with g_{k,t} the terms of the evidence `step` recorded for it in `Turn.verifier["agents"][name]`
(`terms()`), w_k their weights (the class's `WEIGHTS`, overridden per role and term by
`workflow.reward_weights`) and b_t the mask. A missing output (no program, no answer) is
evidence of failure and scores 0 with the mask on; the mask is off only when the verifier's own
resources are missing (golden tests, a reference solution, y*): `terms()` is then None and r = 0.
Each role's evidence type lives in the workflow module that produces it and states its terms.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from verl_masopd.workflows.base import Reward


@dataclass(frozen=True)
class Evidence(ABC):
    """What the verifier found about one agent's output at one turn.

    `verdict`: the output is correct (True / False; None when the check cannot run), the rules
    attribution's verdict. `WEIGHTS`: the default weight of each reward term, keyed as `terms()`.
    """

    WEIGHTS: ClassVar[dict[str, float]]

    verdict: bool | None

    @abstractmethod
    def terms(self) -> dict[str, float] | None:
        """The reward terms g_k, each in [0, 1]; None when the verifier's own resources are missing."""

    def reward(self, weights: Mapping[str, float]) -> Reward:
        """r = b · Σ_k w_k g_k with `weights` w (every term of `WEIGHTS`); b = 0 when `terms()` is None."""
        terms = self.terms()
        if terms is None:
            return Reward(0.0, False, {})
        return Reward(sum(weights[k] * v for k, v in terms.items()), True, terms)

    @classmethod
    def resolve_weights(cls, role: str, overrides: Mapping[str, float] | None) -> dict[str, float]:
        """`WEIGHTS` with `overrides` ({term: weight}, from `workflow.reward_weights.<role>`) applied;
        an unknown term fails, named."""
        weights = dict(cls.WEIGHTS)
        for term, w in (overrides or {}).items():
            if term not in weights:
                raise ValueError(f"workflow.reward_weights.{role}.{term}: unknown term (known: {sorted(weights)})")
            weights[term] = float(w)
        return weights
