"""The reference block of `teacher.privileged=reference`: the problem's reference, teacher-only text.

Self-distillation with privileged context: the teacher is the student itself (teacher.source
frozen or live), or any teacher model, reading the same observation as the student plus the
problem's reference, so that its log-probs on the student's response say how likely each token
is for a model that knows where the solution must end up:

    x_q = encode(arrange(render(episode, agent, t, role=q), layout, b ⊕ p_t))     b: this block

b comes from the dataset row (workflows/problem.py):
    math  the reference answer (reward_model.ground_truth)
    code  the reference program (extra_info.reference_solution); a row without one has no block
    qa    the golden answers (reward_model.ground_truth, a JSON list)
A problem without a reference gets no block (the caller counts it). b goes before PAC's p_t in
the observation's last message, the same under every role condition of a response, and never
into a student's context.
"""

from __future__ import annotations

from verl_masopd.teacher.privileged import reference_text
from verl_masopd.workflows.problem import QA, Problem

REFERENCE_HEADER = "[Privileged reference for this problem, not shown to the agents]"


def reference_block(problem: Problem) -> str | None:
    """b for `problem` (module doc); None when its row carries no reference."""
    if problem.domain == QA:
        text = f"Golden answers: {' | '.join(problem.answers)}" if problem.answers else None
    else:
        text = reference_text(problem)
    return None if text is None else f"{REFERENCE_HEADER}\n{text}"
