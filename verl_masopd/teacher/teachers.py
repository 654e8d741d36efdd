"""Several teachers, in verl's names (`distillation.teacher_models`, `distillation.teacher_key`):
which teachers score a response, and how their scores become the one ℓT the estimators read.

Config (read at start by config/teachers.py):
    distillation.teacher_models.<name>.model_path   a teacher (an entry without one is verl's
                                                    placeholder and is skipped)
    distillation.teacher_models.<name>.key          the routing value it serves (null: every row)
    distillation.teacher_models.<name>.weight       w_t for fixed weights (the project's key; 1)
    distillation.teacher_key                        what a row is routed by: data_source (verl's
                                                    default: the problem's data_source) or role
    distillation.teacher_weighting                  fixed or confidence (the project's keys)
    distillation.teacher_temperature                τ of the confidence weights

With no entry that has a model path, the one teacher is `teacher.model_path`. With entries, they
are the teachers; `teacher.model_path`, when set, must be one of them (it stays the model of PAC's
model attribution), and null means the first.

Self-distillation (`teacher.source` frozen or live, `self_teachers`): one teacher per policy, keyed
by the policy's name and routed by it (route_by `policy`), so that a row is scored by its own
policy, at step 0 (frozen) or now (live); the trainer builds their scorers.

Routing: a response is scored by every teacher whose key equals its row's routing value and by
every teacher whose key is null. Combination over the teachers T that score it, with
m_t = (1/|y|) Σ_i ℓT_t(y_i | x_r, y_<i) over the generated tokens of the own-role pass:

    fixed        α_t = w_t / Σ_{u ∈ T} w_u
    confidence   α_t = exp(m_t / τ) / Σ_{u ∈ T} exp(m_u / τ)          (MAD-OPD's confidence weights)
    ℓT(y_i | x_q, y_<i) = Σ_t α_t ℓT_t(y_i | x_q, y_<i)            for x_r and every contrast x_q

so under k1 d_k = Σ_t α_t (ℓT_t − ℓS_k) and RAS's Δ_k = Σ_t α_t Δ_k,t: each teacher scores the
same contexts, PAC's privileged block and the contrast included, and its part is weighted. A
top-k mode reads one teacher's top k: a response that two teachers would score is refused at
start (`check_teachers`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from verl_masopd.options.errors import require

SECTION = "distillation.teacher_models"
ROUTING = ("data_source", "role")
POLICY = "policy"  # the routing of self-distillation's teachers, one per policy (not a user setting)
WEIGHTINGS = ("fixed", "confidence")


@dataclass(frozen=True)
class Teacher:
    """One teacher: its entry's name, model, routing value (None: every row) and fixed weight."""

    name: str
    model_path: str
    key: str | None = None
    weight: float = 1.0


@dataclass(frozen=True)
class Teachers:
    """The run's teachers, what routes a row to them, and how their scores combine (module doc)."""

    entries: tuple[Teacher, ...]
    route_by: str = "data_source"
    weighting: str = "fixed"
    temperature: float = 1.0

    @property
    def several(self) -> bool:
        return len(self.entries) > 1

    def routing_value(self, role: str, policy: str, data_source: str) -> str:
        """What a row is routed by: its role, its policy (self-distillation) or its problem's data_source."""
        return {"role": role, POLICY: policy}.get(self.route_by, data_source)

    def scoring(self, routing_value: str) -> list[int]:
        """Indices of the teachers that score a row with `routing_value`."""
        return [i for i, t in enumerate(self.entries) if t.key is None or t.key == routing_value]

    def weights(self, teachers: Sequence[int], own: Sequence[Sequence[float]], generated: Sequence[int]) -> list[float]:
        """α_t of `teachers` for one response from their own-role scores `own` (module doc)."""
        if self.weighting == "fixed":
            total = sum(self.entries[t].weight for t in teachers)
            return [self.entries[t].weight / total for t in teachers]
        n = max(sum(generated[: len(own[0])]), 1)
        confidence = [
            sum(x for x, g in zip(scores, generated, strict=False) if g) / n / self.temperature for scores in own
        ]
        top = max(confidence)
        exp = [math.exp(c - top) for c in confidence]
        return [e / sum(exp) for e in exp]


def combine(weights: Sequence[float], rows: Sequence[Sequence[float]]) -> list[float]:
    """Σ_t α_t ℓT_t at every position of one response."""
    return [sum(a * x for a, x in zip(weights, column, strict=True)) for column in zip(*rows, strict=True)]


def self_teachers(policy_paths: dict[str, str]) -> Teachers:
    """Self-distillation's teachers (module doc): policy name → the folder the policy starts from."""
    return Teachers(tuple(Teacher(p, path, key=p) for p, path in policy_paths.items()), route_by=POLICY)


def check_teachers(teachers: Teachers, routing_values: set[str], uses_topk: bool) -> None:
    """Refuse, by key, a routing key no row has, a row no teacher scores, and a top-k mode where
    a row would get several teachers."""
    for t in teachers.entries:
        require(
            t.key is None or t.key in routing_values,
            f"{SECTION}.{t.name}.key",
            f"no row has {teachers.route_by}={t.key!r}; the rows have {sorted(routing_values)}",
        )
    for value in sorted(routing_values):
        scoring = teachers.scoring(value)
        require(
            bool(scoring),
            SECTION,
            f"no teacher scores the rows with {teachers.route_by}={value!r}; add an entry with that key or key null",
        )
        require(
            not uses_topk or len(scoring) == 1,
            "distillation.distillation_loss.loss_mode",
            f"a top-k mode reads one teacher's top k, but {len(scoring)} teachers score the rows with "
            f"{teachers.route_by}={value!r}",
        )
