"""What builds one domain's tiny-world models: its demonstrations, schedule and seed, and the
builder fingerprint that ties shipped weights to them.

The fingerprint is the sha256 of the model size and its config, the schedule (its precision only
when not the default bf16, so the fingerprints of builds made before it could be set stand), the
seed and the token ids of the first demonstration batches the run draws (teacher's and student's):
any change to the task family, the compact prompts, the report, the privileged block, the tokenizer
or the schedule changes it, and the shipped weights then stop the run until rebuilt.

`recipe(domain, teacher_steps, size, precision)` is a domain's recipe with a longer or shorter
teacher schedule (the cosine decay stretched over it), another of pretrain.SIZES or another of
pretrain.PRECISIONS: a variant with its own fingerprint, built beside the shipped weights (`build
--out`), never mistaken for them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from dataclasses import dataclass

from verl_masopd.tiny_world.code_demos import CodeDemonstrations
from verl_masopd.tiny_world.demos import MathDemonstrations
from verl_masopd.tiny_world.models import build_tokenizer
from verl_masopd.tiny_world.pretrain import SEARCH_DEEP_SIZE, SIZES, WORLD_SIZE, Schedule, collate
from verl_masopd.tiny_world.search_demos import SearchDemonstrations
from verl_masopd.workflows.search import CASCADED, HIERARCHICAL

FINGERPRINT_BATCHES = 2


@dataclass(frozen=True)
class Recipe:
    domain: str
    seed: int
    schedule: Schedule
    size: dict = dataclasses.field(default_factory=lambda: dict(WORLD_SIZE))

    def demonstrations(self, tokenizer, role_confusion: float = 0.0):
        if self.domain == "math":
            return MathDemonstrations(tokenizer, role_confusion)
        if self.domain == "code":
            return CodeDemonstrations(tokenizer, role_confusion)
        raise ValueError(f"no tiny-world recipe for domain {self.domain!r}")

    def draws(self, tokenizer) -> tuple:
        """The teacher's and the student's demonstration draws; search: the teacher's of the
        cascaded system, the student's of the hierarchical one."""
        if self.domain == "search":
            return (
                SearchDemonstrations(tokenizer, CASCADED).draw,
                SearchDemonstrations(tokenizer, HIERARCHICAL, self.schedule.role_confusion).draw,
            )
        return (
            self.demonstrations(tokenizer).draw,
            self.demonstrations(tokenizer, self.schedule.role_confusion).draw,
        )

    def fingerprint(self, tokenizer=None) -> str:
        tokenizer = tokenizer or build_tokenizer()
        rng = random.Random(self.seed)
        digest = hashlib.sha256()
        schedule = dataclasses.asdict(self.schedule)
        if schedule["precision"] == "bf16":
            del schedule["precision"]
        settings = {"domain": self.domain, "seed": self.seed, "size": self.size, "schedule": schedule}
        digest.update(json.dumps(settings, sort_keys=True).encode())
        for draw in self.draws(tokenizer):
            for _ in range(FINGERPRINT_BATCHES):
                batch = collate(tokenizer, [draw(rng) for _ in range(self.schedule.batch_size)])
                digest.update(json.dumps(batch["input_ids"].tolist()).encode())
        return digest.hexdigest()[:16]


RECIPES = {
    "math": Recipe("math", seed=0, schedule=Schedule(steps=8000, student_steps=200, role_confusion=0.7)),
    "code": Recipe("code", seed=0, schedule=Schedule(steps=8000, student_steps=200, role_confusion=0.7)),
    # The deeper search size, trained 20,000 steps in float32: a teacher that copies the retrieved
    # fact (C-MAS EM 0.26; the earlier recipe, `--teacher-steps 5000 --size search --precision bf16`,
    # reached 0.107). docs/search.md has both calibrations.
    "search": Recipe(
        "search",
        seed=0,
        schedule=Schedule(steps=20000, student_steps=400, role_confusion=0.7, student_lr=1e-3, precision="fp32"),
        size=dict(SEARCH_DEEP_SIZE),
    ),
}


def recipe(
    domain: str, teacher_steps: int | None = None, size: str | None = None, precision: str | None = None
) -> Recipe:
    """The domain's recipe; with `teacher_steps`, `size` (a name of pretrain.SIZES) or `precision`
    (of pretrain.PRECISIONS) the variant with that many teacher steps, that model size or that
    precision. Raises ValueError naming a bad value."""
    if domain not in RECIPES:
        raise ValueError(f"no tiny-world models for domain {domain!r} (known: {sorted(RECIPES)})")
    r = RECIPES[domain]
    if teacher_steps is not None:
        r = dataclasses.replace(r, schedule=dataclasses.replace(r.schedule, steps=teacher_steps))
    if size is not None:
        if size not in SIZES:
            raise ValueError(f"no model size {size!r} (known: {sorted(SIZES)})")
        r = dataclasses.replace(r, size=dict(SIZES[size]))
    if precision is not None:
        r = dataclasses.replace(r, schedule=dataclasses.replace(r.schedule, precision=precision))
    return r
