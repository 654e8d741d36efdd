"""Role advantage Δ of held-out responses under the teacher (RAS, docs/method.md, "MAS-OPD"), for evaluation.

Every response y of role r is scored by the project's teacher scoring (`TeacherScoring`) under its
own role condition and the κ = |roles| − 1 contrasting ones, without privileged blocks (no PAC:
the held-out episodes are judged as the student saw them):

    Δ_k = ℓT_k(r) − mean_{q∈C_r} ℓT_k(q),    Δ̄(y) = (1/|y|) Σ_k Δ_k

Δ̄ > 0: the teacher finds the response more typical of the role it was written for than of the
other role(s). `evaluate` (rollout/evaluation.py) writes into each turn record "role_advantage":
{agent: Δ̄ or None (empty response)}.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from verl_masopd.rollout.records import RolloutGroup, episodes_of
from verl_masopd.teacher.contexts import TeacherContextBuilder
from verl_masopd.teacher.scoring import TeacherScorer, TeacherScoring
from verl_masopd.workflows.base import Workflow


class RoleAdvantageScorer:
    """Δ̄ per (episode_id, turn, agent) for finished episodes, with `scorer` holding the teacher."""

    def __init__(
        self, workflow: Workflow, tokenizer, scorer: TeacherScorer, max_context_length: int, layout: str = "role_first"
    ):
        if len(workflow.roles) < 2:
            raise ValueError(f"--teacher: the {workflow.name!r} workflow has one role, no contrasting role to score")
        builder = TeacherContextBuilder(workflow, tokenizer, max_context_length, layout=layout)
        self.scoring = TeacherScoring(builder, scorer, len(workflow.roles) - 1, pac_enable=False)

    async def __call__(self, groups: Sequence[RolloutGroup]) -> dict[tuple[str, int, str], float]:
        results = episodes_of(groups)
        await self.scoring.score(results)
        out = {}
        for result in results:
            for s in result.samples:
                if s.teacher is None or not any(s.generated):
                    continue
                own = torch.tensor(s.teacher.log_probs, dtype=torch.float32)
                contrast = torch.tensor(s.teacher.contrast, dtype=torch.float32).mean(dim=0)
                mask = torch.tensor(s.generated[: len(own)], dtype=torch.float32)
                out[(result.episode_id, s.turn, s.agent)] = float(((own - contrast) * mask).sum() / mask.sum())
        return out
