"""The tiny world's code task family and compact Coder–Tester prompts: generated problems are
deterministic, train and held-out ranges are disjoint, every family's reference passes its golden
tests in the sandbox, the compact contexts stay short, and the demonstrations' simulated first
turns are what the real workflow step produces, deciding as the verdicts say."""

import random
import shutil
from pathlib import Path

import pytest

from data_prep.check_solutions import check_solutions
from data_prep.schema import read_problems
from data_prep.writer import write_rows
from verl_masopd.sandbox import run_many
from verl_masopd.tiny_world.builder import recipe
from verl_masopd.tiny_world.code_demos import CodeDemonstrations, Program, wrong_program
from verl_masopd.tiny_world.code_tasks import FAMILIES, GOLDEN_TESTS, code_rows, task
from verl_masopd.tiny_world.math_tasks import HELDOUT_START, VALIDATION_START
from verl_masopd.tiny_world.weights import WEIGHTS, WeightsError, rebuild_command, verified_models
from verl_masopd.tiny_world.world import ensure_data, ensure_validation_data, models
from verl_masopd.tokens.chat import encode_messages
from verl_masopd.workflows import make_workflow
from verl_masopd.workflows.code import CodeWorkflow
from verl_masopd.workflows.problem import Problem

SAMPLE = [*range(0, 40), *range(HELDOUT_START, HELDOUT_START + 40)]


def _one_per_family(start: int) -> list[int]:
    """The first problem index >= start of every family."""
    found = {}
    i = start
    while len(found) < len(FAMILIES):
        found.setdefault(task(i).family.name, i)
        i += 1
    return sorted(found.values())


def test_problem_i_depends_on_i_alone():
    assert [task(i) for i in SAMPLE] == [task(i) for i in SAMPLE]
    assert code_rows(0, 8, "train")[:5] == code_rows(0, 5, "train")
    assert task(3) != task(7)
    assert [task(i).level for i in range(8)] == [1, 2, 3, 4, 1, 2, 3, 4]
    assert {task(i).family.level for i in range(8)} == {1, 2, 3, 4}
    assert all(len(task(i).tests) == GOLDEN_TESTS for i in SAMPLE)


def test_train_heldout_and_validation_files_are_disjoint_index_ranges(tmp_path):
    train_file, heldout_file = ensure_data(tmp_path, "code", 12, 8)
    train, heldout = read_problems(train_file), read_problems(heldout_file)
    assert [p.uid for p in train] == [f"tiny-code-{i}" for i in range(12)]
    assert [p.uid for p in heldout] == [f"tiny-code-{i}" for i in range(HELDOUT_START, HELDOUT_START + 8)]
    validation = read_problems(ensure_validation_data(tmp_path, "code", 4))
    assert [p.uid for p in validation] == [f"tiny-code-{i}" for i in range(VALIDATION_START, VALIDATION_START + 4)]
    assert VALIDATION_START > HELDOUT_START + 400  # the recipes' 400 held-out problems end before it
    first = heldout[0]
    assert first.domain == "code" and first.data_source == f"tiny_code_L{task(HELDOUT_START).level}"
    assert first.tests == task(HELDOUT_START).tests and first.reference_solution == task(HELDOUT_START).reference
    assert not first.public_tests and not first.fn_name


def test_every_family_s_reference_passes_its_golden_tests_in_the_sandbox(tmp_path):
    indices = _one_per_family(0) + _one_per_family(HELDOUT_START)
    rows = [code_rows(i, 1, "train")[0] for i in indices]
    path = tmp_path / "sample.parquet"
    write_rows(rows, path)
    report = check_solutions(path)
    assert report.checked == 2 * len(FAMILIES)
    assert report.passed == report.checked, report.format()


def test_the_workflow_agrees_on_reference_outputs_in_the_compact_style():
    workflow = make_workflow("mas", "code", horizon=2, prompt_style="compact")
    t = task(HELDOUT_START + 2)
    problem = Problem.from_row(code_rows(t.index, 1, "test")[0])
    episode = workflow.reset(problem)
    coder, tester = episode.agents
    line = "3 1 2" if t.family.kind == "numbers" else "bca"
    actions = {
        coder.name: workflow.parse(coder, f"```python\n{t.reference}```"),
        tester.name: workflow.parse(tester, f"```input\n{line}\n```\n```output\n{t.output(line)}\n```"),
    }
    turn = workflow.step(episode, actions)
    assert turn.agreed and workflow.judge(episode).correct
    assert turn.report == f"tester_0 in {line} want {t.output(line)}, coder_0 got {t.output(line)}; agree"


def test_compact_contexts_stay_within_about_200_tokens(tiny_tokenizer):
    demos = CodeDemonstrations(tiny_tokenizer)
    rng = random.Random(0)
    lengths = {False: [], True: []}
    for _ in range(200):
        demo = demos.draw(rng)
        privileged = "[Privileged feedback" in demo.messages[-1]["content"]
        lengths[privileged].append(len(encode_messages(tiny_tokenizer, demo.messages)))
    assert max(lengths[False]) <= 230, max(lengths[False])
    assert sum(lengths[False]) / len(lengths[False]) <= 170
    assert lengths[True], "no privileged contexts drawn"
    paper = CodeWorkflow(1, 2)
    episode = paper.reset(Problem(uid="p", domain="code", statement=task(3).statement))
    assert len(encode_messages(tiny_tokenizer, paper.render(episode, episode.agents[0], 0))) > 2 * min(lengths[False])


def test_simulated_first_turns_are_what_the_workflow_step_reports(tiny_tokenizer):
    """Replaying a demonstration's first-turn actions through the real step (sandbox runs
    included) gives the same report and verdicts the demonstration recorded."""
    demos = CodeDemonstrations(tiny_tokenizer)
    rng = random.Random(2)
    replayed = 0
    while replayed < 6:
        t = task(rng.randrange(HELDOUT_START))
        episode = demos.workflow.reset(
            Problem(uid="p", domain="code", statement=t.statement, tests=t.tests, reference_solution=t.reference)
        )
        demos._first_turn(episode, t, rng)
        recorded = episode.turns[0]
        replay = demos.workflow.reset(episode.problem)
        actions = {name: demos.workflow.parse(replay.agent(name), a.text) for name, a in recorded.actions.items()}
        turn = demos.workflow.step(replay, actions)
        assert turn.report == recorded.report
        assert not turn.agreed
        for name, evidence in turn.verifier["agents"].items():
            assert evidence.verdict == recorded.verifier["agents"][name].verdict, (name, turn.report)
        replayed += 1


def test_second_turn_demonstrations_decide_first_as_the_verdicts_say(tiny_tokenizer):
    demos = CodeDemonstrations(tiny_tokenizer)
    rng = random.Random(1)
    seen = set()
    decisions = {True: [], False: []}
    for _ in range(600):
        demo = demos.draw(rng)
        user = demo.messages[-1]["content"]
        t = demo.task
        assert t.index < HELDOUT_START and user.startswith(f"Q: {t.statement}")
        if "\nReport: " not in user:
            assert not demo.reply.startswith(("hold", "revise"))
            continue
        decision, output = demo.reply.split("\n", 1)
        seen.add((decision, "[Privileged feedback" in user))
        own = user.split("\nYou: ", 1)[1].split("\ntester_0: ")[0].split("\ncoder_0: ")[0]
        coder = own.startswith("```python")
        agent = demos.workflow.agents[0 if coder else 1]
        fields = demos.workflow.parse(agent, own).fields
        if coder:  # a wrong program's text always differs from the reference (code_demos.wrong_program)
            right = fields["code"].strip() == t.reference.strip()
        else:
            right = t.output(fields["test_input"].strip()) == fields["test_output"].strip()
        assert decision == ("hold" if right else "revise"), (user, demo.reply)
        if decision == "revise" and coder:
            assert output == f"```python\n{t.reference}```"
        if decision == "revise" and not coder:
            line = fields["test_input"].strip()
            assert output == f"```input\n{line}\n```\n```output\n{t.output(line)}\n```"
        decisions[coder].append(decision)
    assert seen == {("hold", False), ("hold", True), ("revise", False), ("revise", True)}
    # a program for a known statement is more reliable than an output computed by hand: after a
    # disagreement the Coder is the one to hold, the Tester the one to revise, most of the time
    assert decisions[True].count("hold") > 0.55 * len(decisions[True])
    assert decisions[False].count("revise") > 0.55 * len(decisions[False])


def test_the_students_coder_writes_a_share_of_its_replies_as_tests(tiny_tokenizer):
    rng = random.Random(2)
    for confusion in (0.0, 0.5):
        demos = CodeDemonstrations(tiny_tokenizer, role_confusion=confusion)
        replies = [
            d.reply for d in (demos.draw(rng) for _ in range(600)) if d.messages[0]["content"].startswith("Coder")
        ]
        tests = sum("```input" in reply for reply in replies) / len(replies)
        assert abs(tests - confusion) < 0.08, (confusion, tests)


def test_simulated_program_outputs_are_what_the_sandbox_prints():
    rng = random.Random(0)
    jobs, expected = [], []
    for i in _one_per_family(0):
        t = task(i)
        wrong = wrong_program(t, rng)
        assert wrong.text != t.reference.strip()
        for program in (wrong, Program(t.family, t.k, t.c)):
            for case in t.tests:
                jobs.append((program.text + "\n", case.input))
                expected.append(program.run(case.input.strip()))
    results = run_many(jobs, timeout=10.0)
    assert [r.stdout.strip() for r in results] == expected


def test_the_shipped_code_weights_match_their_manifest_and_builder(tmp_path):
    paths = models("code")
    assert Path(paths["teacher"]).parent == WEIGHTS / "code"
    copy = tmp_path / "code"
    shutil.copytree(WEIGHTS / "code", copy)
    weights = copy / "student" / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(WeightsError, match=f"{weights}: sha256 does not match .*{rebuild_command('code')}"):
        verified_models("code", recipe("code").fingerprint(), root=tmp_path)
    with pytest.raises(WeightsError, match="but this code's builder is"):
        verified_models("code", "0" * 16)
