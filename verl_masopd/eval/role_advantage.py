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

from verl_masopd.rollout.batch import to_dataproto
from verl_masopd.rollout.records import FAILED, RolloutGroup, episodes_of
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
        self.pad_id = tokenizer.pad_token_id

    async def __call__(self, groups: Sequence[RolloutGroup]) -> dict[tuple[str, int, str], float]:
        results = episodes_of(groups)
        samples = [s for r in results for s in r.samples if s.finish_reason != FAILED]
        longest = max((len(s.response_ids) for s in samples), default=0)
        widest = max((len(s.prompt_ids) for s in samples), default=0)
        if longest == 0:
            return {}
        batch = to_dataproto(groups, None, widest, longest, self.pad_id)
        await self.scoring.score(batch, {r.episode_id: r.episode for r in results})
        mask = batch.batch["response_mask"].float()
        delta = batch.batch["teacher_log_probs"] - batch.batch["teacher_contrast_log_probs"].mean(dim=1)
        means = (delta * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        nt = batch.non_tensor_batch
        return {
            (str(nt["episode_id"][b]), int(nt["turn"][b]), str(nt["agent"][b])): float(means[b])
            for b in range(len(means))
            if mask[b].sum() > 0
        }
