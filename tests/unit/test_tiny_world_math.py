"""The tiny world's math task family and compact prompts: generated problems are deterministic,
train and held-out ranges are disjoint, every reference program passes the sandbox and the
verifier, the compact contexts stay short, and demonstrations decide as the verdicts say."""

import random

import pytest

from verl_masopd.sandbox import run_many
from verl_masopd.tiny_world.demos import MathDemonstrations, wrong_expression
from verl_masopd.tiny_world.math_tasks import (
    HELDOUT_START,
    VALIDATION_START,
    evaluate,
    math_rows,
    reference_program,
    task,
)
from verl_masopd.tiny_world.world import ensure_data, ensure_validation_data
from verl_masopd.tokens.chat import encode_messages
from verl_masopd.verify import extract_program_answer, math_equal
from verl_masopd.workflows import make_workflow
from verl_masopd.workflows.math import REASONER, TOOL_USER, MathWorkflow
from verl_masopd.workflows.problem import Problem
from verl_masopd.workflows.prompted import COMPACT, PAPER

SAMPLE = [*range(0, 40), *range(HELDOUT_START, HELDOUT_START + 40)]


def test_problem_i_depends_on_i_alone():
    assert [task(i) for i in SAMPLE] == [task(i) for i in SAMPLE]
    assert math_rows(0, 8, "train")[:5] == math_rows(0, 5, "train")
    assert task(3) != task(7)
    assert [task(i).level for i in range(8)] == [1, 2, 3, 4, 1, 2, 3, 4]


def test_train_heldout_and_validation_files_are_disjoint_index_ranges(tmp_path):
    train_file, heldout_file = ensure_data(tmp_path, "math", 12, 8)
    from data_prep.schema import read_problems

    train, heldout = read_problems(train_file), read_problems(heldout_file)
    assert [p.uid for p in train] == [f"tiny-math-{i}" for i in range(12)]
    assert [p.uid for p in heldout] == [f"tiny-math-{i}" for i in range(HELDOUT_START, HELDOUT_START + 8)]
    validation = read_problems(ensure_validation_data(tmp_path, "math", 4))
    assert [p.uid for p in validation] == [f"tiny-math-{i}" for i in range(VALIDATION_START, VALIDATION_START + 4)]
    assert VALIDATION_START > HELDOUT_START + 400  # the recipes' 400 held-out problems end before it


def test_the_expression_evaluates_with_precedence():
    assert evaluate("2 + 3 * 4") == 14
    assert evaluate("9 - 6 - 7") == -4
    assert evaluate("8 * 3 - 5") == 19
    for i in range(2000):
        t = task(i)
        assert evaluate(t.expression) == eval(t.expression) == t.answer  # noqa: S307 (generated digits and + - *)


def test_every_reference_program_passes_the_sandbox_and_the_verifier():
    rows = math_rows(0, 40, "train") + math_rows(HELDOUT_START, 40, "test")
    problems = [Problem.from_row(r) for r in rows]
    results = run_many([(p.reference_solution, "") for p in problems], timeout=10.0)
    for problem, result in zip(problems, results, strict=True):
        assert result.ok, (problem.uid, result)
        assert math_equal(extract_program_answer(result.stdout), problem.answer), (problem.uid, result.stdout)


def test_the_workflow_agrees_on_reference_outputs_in_the_compact_style():
    workflow = make_workflow("mas", "math", horizon=2, prompt_style="compact")
    t = task(5)
    problem = Problem.from_row(math_rows(5, 1, "train")[0])
    episode = workflow.reset(problem)
    reasoner, tool_user = episode.agents
    actions = {
        reasoner.name: workflow.parse(reasoner, f"#### {t.answer}"),
        tool_user.name: workflow.parse(tool_user, f"```python\n{reference_program(t)}```"),
    }
    turn = workflow.step(episode, actions)
    assert turn.agreed and workflow.judge(episode).correct
    assert turn.report == f"reasoner_0 {t.answer}, tool_user_0 {t.answer}, agree"


def test_prompt_style_is_validated_and_paper_is_the_default():
    assert make_workflow("mas", "math").prompt_style == PAPER
    with pytest.raises(ValueError, match="workflow.prompt_style must be one of"):
        make_workflow("mas", "math", prompt_style="terse")
    for name, domain in (("mas", "math"), ("mas", "code"), ("sa", "math"), ("sa", "code")):
        assert make_workflow(name, domain, prompt_style="compact").prompt_style == COMPACT

    class WithoutCompact(MathWorkflow):
        compact_instructions = {}

    with pytest.raises(ValueError, match="workflow.prompt_style: workflow 'mas' \\(math\\) has no compact prompts"):
        WithoutCompact(1, 2, prompt_style="compact")


def test_compact_contexts_stay_within_about_200_tokens(tiny_tokenizer):
    demos = MathDemonstrations(tiny_tokenizer)
    rng = random.Random(0)
    lengths = {False: [], True: []}
    for _ in range(200):
        demo = demos.draw(rng)
        privileged = "[Privileged feedback" in demo.messages[-1]["content"]
        lengths[privileged].append(len(encode_messages(tiny_tokenizer, demo.messages)))
    assert max(lengths[False]) <= 200, max(lengths[False])
    assert lengths[True], "no privileged contexts drawn"
    paper = MathWorkflow(1, 2)
    episode = paper.reset(Problem(uid="p", domain="math", statement=task(3).statement, answer="1"))
    assert len(encode_messages(tiny_tokenizer, paper.render(episode, episode.agents[0], 0))) > 2 * min(lengths[False])


def test_second_turn_demonstrations_decide_first_as_the_verdicts_say(tiny_tokenizer):
    demos = MathDemonstrations(tiny_tokenizer)
    rng = random.Random(1)
    seen = set()
    decisions = {REASONER: [], TOOL_USER: []}
    for _ in range(600):
        demo = demos.draw(rng)
        user = demo.messages[-1]["content"]
        if "\nReport: " not in user:
            assert not demo.reply.startswith(("hold", "revise"))
            continue
        decision, answer = demo.reply.split("\n", 1)
        seen.add((decision, "[Privileged feedback" in user))
        problem = demo.task
        assert problem.index < HELDOUT_START and user.startswith(f"Q: {problem.statement}\n")
        role = REASONER if demo.messages[0]["content"].startswith("Reasoner") else TOOL_USER
        agent = demos.workflow.agents_of(role)[0]
        report = user.split("\nReport: ", 1)[1].split("\n")[0]  # "reasoner_0 4, tool_user_0 3, disagree"
        values = dict(part.split(" ", 1) for part in report.split(", ")[:-1])
        own_value = None if values[agent.name] in ("none", "failed") else int(values[agent.name])
        assert decision == ("hold" if own_value == problem.answer else "revise"), (user, demo.reply)
        assert answer == (
            f"#### {problem.answer}" if role == REASONER else f"```python\nprint({problem.expression})\n```"
        )
        decisions[role].append(decision)
    assert seen == {("hold", False), ("hold", True), ("revise", False), ("revise", True)}
    # a program is more reliable than mental arithmetic: after a disagreement the Reasoner is the
    # one to revise, the Tool-User the one to hold, most of the time
    assert decisions[REASONER].count("revise") > 0.7 * len(decisions[REASONER])
    assert decisions[TOOL_USER].count("hold") > 0.6 * len(decisions[TOOL_USER])


def test_the_students_reasoner_writes_a_share_of_its_replies_as_programs(tiny_tokenizer):
    rng = random.Random(2)
    for confusion in (0.0, 0.5):
        demos = MathDemonstrations(tiny_tokenizer, role_confusion=confusion)
        replies = [
            d.reply for d in (demos.draw(rng) for _ in range(600)) if d.messages[0]["content"].startswith("Reasoner")
        ]
        programs = sum("```python" in reply for reply in replies) / len(replies)
        assert abs(programs - confusion) < 0.08, (confusion, programs)


def test_wrong_expressions_are_wrong():
    rng = random.Random(0)
    for i in range(500):
        t = task(i)
        assert evaluate(wrong_expression(t, rng)) != t.answer
