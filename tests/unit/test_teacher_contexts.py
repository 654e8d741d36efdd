"""Teacher contexts and PAC: templates for one and several agents per role, privileged text only in
teacher contexts, the truncation rule through the builder, and both attribution routes with
their fallbacks counted."""

import os

from verl_masopd.rollout.backend import Generation
from verl_masopd.teacher.attribution import (
    BAD_VERDICT,
    MISSING_VERDICT,
    NO_JSON,
    NO_REFERENCE,
    Attributor,
    parse_verdicts,
    verifier_wins,
)
from verl_masopd.teacher.contexts import TeacherContextBuilder
from verl_masopd.teacher.metrics import attribution_metrics
from verl_masopd.teacher.privileged import HEADER, privileged_block
from verl_masopd.tokens.chat import encode_messages
from verl_masopd.workflows.base import HOLD, REVISE, Action, Attribution, Judgement, Turn, Workflow
from verl_masopd.workflows.problem import Problem


class PairWorkflow(Workflow):
    """Two roles answering a math problem; they agree when all answers are equal."""

    name, domain, roles = "pair", "math", ("solver", "checker")

    def render(self, episode, agent, turn, role=None):
        lines = [f"Problem: {episode.problem.statement}"]
        if turn > 0:
            previous = episode.turns[turn - 1]
            lines += [f"{name} answered {action.text}" for name, action in previous.actions.items()]
            lines.append(f"Report: {previous.report}")
        return [
            {"role": "system", "content": f"You are the {role or agent.role}."},
            {"role": "user", "content": "\n".join(lines)},
        ]

    def parse(self, agent, text):
        answer = text.strip()
        return Action(agent, text, {"answer": answer} if answer else {}, None if answer else "empty output")

    def step(self, episode, actions):
        answers = {name: action.fields.get("answer") for name, action in actions.items()}
        reference = episode.problem.answer
        verdicts = {name: None if reference is None else answer == reference for name, answer in answers.items()}
        agreed = len(set(answers.values())) == 1
        turn = Turn(
            len(episode.turns), dict(actions), "" if agreed else "the answers differ", agreed, {"verdicts": verdicts}
        )
        episode.turns.append(turn)
        episode.done = agreed or len(episode.turns) >= self.horizon
        return turn

    def judge(self, episode):
        answer = episode.turns[-1].actions["solver_0"].fields.get("answer")
        correct = answer == episode.problem.answer
        return Judgement(correct=correct, team=float(correct), submission=answer)

    def attribute(self, episode, turn):
        record = episode.turns[turn]
        if record.agreed:
            return None
        verdicts = dict(record.verifier["verdicts"])
        decisions = {name: HOLD if ok else REVISE for name, ok in verdicts.items() if ok is not None}
        return Attribution(turn=turn, verdicts=verdicts, decisions=decisions)


def play(workflow, problem, turns):
    """An episode whose turn i has the answers turns[i] (agent name → text)."""
    episode = workflow.reset(problem)
    for answers in turns:
        workflow.step(episode, {a.name: workflow.parse(a, answers[a.name]) for a in workflow.agents})
    return episode


def attribution(turn, verdicts):
    return Attribution(turn, verdicts, {n: HOLD if ok else REVISE for n, ok in verdicts.items()})


PROBLEM = Problem(uid="p1", domain="math", statement="What is 6 times 7?", answer="42")


def test_template_for_one_agent_per_role():
    workflow = PairWorkflow()
    episode = play(workflow, PROBLEM, [{"solver_0": "41", "checker_0": "42"}])
    block = privileged_block(attribution(0, {"solver_0": False, "checker_0": True}), episode, "solver_0")
    assert block == "\n".join(
        [
            HEADER,
            "The previous turn ended in a conflict.",
            "The solver's output (you) was wrong: the solver should revise its output.",
            "The checker's output was correct: the checker should hold its output.",
        ]
    )


def test_template_for_several_agents_per_role_lists_every_verdict():
    workflow = PairWorkflow(agents_per_role=2)
    episode = play(workflow, PROBLEM, [{"solver_0": "42", "solver_1": "40", "checker_0": "41", "checker_1": "42"}])
    verdicts = {"solver_0": True, "solver_1": False, "checker_0": False, "checker_1": True}
    block = privileged_block(attribution(0, verdicts), episode, "checker_1")
    assert block == "\n".join(
        [
            HEADER,
            "The previous turn ended in a conflict.",
            "solver agents:",
            "- solver_0: correct; should hold its output.",
            "- solver_1: wrong; should revise its output.",
            "checker agents:",
            "- checker_0: wrong; should revise its output.",
            "- checker_1 (you): correct; should hold its output.",
        ]
    )


def test_reference_only_with_reveal_reference():
    workflow = PairWorkflow()
    episode = play(workflow, PROBLEM, [{"solver_0": "41", "checker_0": "40"}])
    a = attribution(0, {"solver_0": False, "checker_0": False})
    assert "42" not in privileged_block(a, episode, "solver_0")
    assert privileged_block(a, episode, "solver_0", reveal_reference=True).endswith("\nReference answer: 42")


def test_privileged_text_reaches_teacher_contexts_and_never_a_student_context(tiny_tokenizer):
    workflow = PairWorkflow()
    episode = play(workflow, PROBLEM, [{"solver_0": "41", "checker_0": "42"}, {"solver_0": "42", "checker_0": "42"}])
    a0 = workflow.attribute(episode, 0)
    builder = TeacherContextBuilder(workflow, tiny_tokenizer, max_length=4096)
    for agent in ("solver_0", "checker_0"):
        student = workflow.render(episode, episode.agent(agent), 1)
        teacher = {q: builder.messages(episode, agent, 1, q, a0) for q in workflow.roles}
        assert all(HEADER not in m["content"] for m in student)
        for messages, privileged in teacher.values():
            assert privileged and HEADER in messages[-1]["content"]
        # both role conditions carry the same block: they differ in the system message only
        (solver_view, _), (checker_view, _) = teacher["solver"], teacher["checker"]
        assert solver_view[1:] == checker_view[1:] and solver_view[0] != checker_view[0]
        context = builder.build(episode, agent, 1, "solver", a0, response_len=3)
        assert HEADER in tiny_tokenizer.decode(context.ids) and context.privileged
        assert HEADER not in tiny_tokenizer.decode(encode_messages(tiny_tokenizer, student))
        # building teacher contexts changed nothing the students render
        assert workflow.render(episode, episode.agent(agent), 1) == student
    turn0 = builder.build(episode, "solver_0", 0, "solver", None, response_len=3)
    assert not turn0.privileged and HEADER not in tiny_tokenizer.decode(turn0.ids)


def test_incomplete_attribution_gives_no_block(tiny_tokenizer):
    workflow = PairWorkflow()
    problem = Problem(uid="p2", domain="math", statement="Guess a number.", answer=None)
    episode = play(workflow, problem, [{"solver_0": "1", "checker_0": "2"}, {"solver_0": "3", "checker_0": "3"}])
    a0 = workflow.attribute(episode, 0)
    assert not a0.complete
    messages, privileged = TeacherContextBuilder(workflow, tiny_tokenizer, 4096).messages(
        episode, "solver_0", 1, "solver", a0
    )
    assert not privileged and messages == workflow.render(episode, episode.agent("solver_0"), 1)


def test_builder_truncation_keeps_the_response_budget_and_the_context_ends(tiny_tokenizer):
    workflow = PairWorkflow()
    episode = play(
        workflow, PROBLEM, [{"solver_0": "41 " * 40, "checker_0": "42"}, {"solver_0": "42", "checker_0": "42"}]
    )
    a0 = workflow.attribute(episode, 0)
    full = TeacherContextBuilder(workflow, tiny_tokenizer, 4096).build(episode, "solver_0", 1, "solver", a0, 10)
    assert full.cut_tokens == 0
    limit = len(full.ids) // 2 + 10
    short = TeacherContextBuilder(workflow, tiny_tokenizer, limit).build(episode, "solver_0", 1, "solver", a0, 10)
    budget = limit - 10
    assert len(short.ids) == budget and short.cut_tokens == len(full.ids) - budget
    # one contiguous gap, away from both ends of the context
    gap = len(os.path.commonprefix([short.ids, full.ids]))
    assert short.ids[gap:] == full.ids[gap + short.cut_tokens :]
    assert gap >= budget // 4 and len(full.ids) - gap - short.cut_tokens >= budget // 4


def test_parse_verdicts_reads_the_first_json_object_and_names_failures():
    agents = ["solver_0", "checker_0"]
    text = 'Verdicts: ```json\n{"solver_0": "Wrong", "checker_0": "correct"}\n``` done'
    assert parse_verdicts(text, agents) == ({"solver_0": False, "checker_0": True}, "")
    assert parse_verdicts("both look fine", agents) == (None, NO_JSON)
    assert parse_verdicts('{"solver_0": "correct"}', agents) == (None, MISSING_VERDICT)
    assert parse_verdicts('{"solver_0": true, "checker_0": "wrong"}', agents) == (None, BAD_VERDICT)


class ScriptedAttributionModel:
    """A generation backend that answers each attribution prompt by the problem it names."""

    def __init__(self, tokenizer, replies):
        self.tokenizer = tokenizer
        self.replies = replies
        self.calls = []

    async def generate(self, prompts, sampling):
        self.calls.append(len(prompts))
        texts = [self.tokenizer.decode(p) for p in prompts]
        out = []
        for text in texts:
            reply = next(r for key, r in self.replies.items() if key in text)
            ids = self.tokenizer.encode(reply, add_special_tokens=False)
            out.append(Generation(token_ids=ids, log_probs=[-1.0] * len(ids), finish_reason="stop"))
        return out

    def update_weights(self, state_dict, version):
        raise AssertionError("the attribution model is frozen")


async def test_rules_route_attributes_conflict_turns_followed_by_another_turn():
    workflow = PairWorkflow()
    episode = play(workflow, PROBLEM, [{"solver_0": "41", "checker_0": "42"}, {"solver_0": "40", "checker_0": "42"}])
    result = await Attributor(workflow).attribute({"e1": episode})
    assert list(result.by_turn) == [("e1", 0)]
    assert result.previous("e1", 1).decisions == {"solver_0": REVISE, "checker_0": HOLD}
    assert result.previous("e1", 0) is None and result.model_calls == 0


async def test_model_route_one_call_per_turn_and_counted_fallbacks(tiny_tokenizer):
    workflow = PairWorkflow()
    answers = [{"solver_0": "41", "checker_0": "42"}, {"solver_0": "42", "checker_0": "42"}]
    problems = {
        name: Problem(uid=name, domain="math", statement=f"Problem {name}: 6 times 7?", answer="42")
        for name in ("parsed", "garbled", "partial")
    }
    episodes = {f"e-{name}": play(workflow, p, answers) for name, p in problems.items()}
    episodes["e-noref"] = play(workflow, Problem(uid="noref", domain="math", statement="No reference here"), answers)
    model = ScriptedAttributionModel(
        tiny_tokenizer,
        {
            "Problem parsed": '{"solver_0": "correct", "checker_0": "wrong"}',
            "Problem garbled": "I cannot tell.",
            "Problem partial": '{"checker_0": "correct"}',
        },
    )
    result = await Attributor(workflow, "model", model, tiny_tokenizer).attribute(episodes)
    assert model.calls == [3] and result.model_calls == 3
    assert dict(result.fallbacks) == {NO_JSON: 1, MISSING_VERDICT: 1, NO_REFERENCE: 1}
    # the model's verdicts (deliberately unlike the verifier's facts) are overridden and counted
    parsed = result.previous("e-parsed", 1)
    assert parsed.source == "model" and parsed.verdicts == {"solver_0": False, "checker_0": True}
    assert parsed.decisions == {"solver_0": REVISE, "checker_0": HOLD}
    assert result.overrides == 2
    for eid in ("e-garbled", "e-partial"):
        assert result.previous(eid, 1).source == "rules"
        assert result.previous(eid, 1).verdicts == {"solver_0": False, "checker_0": True}
    assert result.previous("e-noref", 1).verdicts == {"solver_0": None, "checker_0": None}
    assert result.incomplete == 1


def test_model_verdicts_stand_only_where_the_verifier_has_no_fact():
    """docs/method.md (PAC model route): the model locates, the verifier decides; a contradiction
    is overridden and counted."""
    facts = Attribution(0, {"solver_0": False, "checker_0": None}, {"solver_0": REVISE})
    verdicts, overridden = verifier_wins({"solver_0": True, "checker_0": False}, facts)
    assert verdicts == {"solver_0": False, "checker_0": False} and overridden == 1
    assert verifier_wins({"solver_0": False, "checker_0": True}, facts) == ({"solver_0": False, "checker_0": True}, 0)
    assert verifier_wins({"solver_0": True}, None) == ({"solver_0": True}, 0)


async def test_model_route_overrides_reach_the_step_metrics(tiny_tokenizer):
    workflow = PairWorkflow()
    episode = play(workflow, PROBLEM, [{"solver_0": "41", "checker_0": "42"}, {"solver_0": "42", "checker_0": "42"}])
    model = ScriptedAttributionModel(tiny_tokenizer, {"6 times 7": '{"solver_0": "correct", "checker_0": "correct"}'})
    result = await Attributor(workflow, "model", model, tiny_tokenizer).attribute({"e1": episode})
    assert result.previous("e1", 1).verdicts == {"solver_0": False, "checker_0": True}
    assert attribution_metrics(result)["teacher/attribution_overrides"] == 1.0
