"""A tool-using workflow in one file: a math agent that calls a calculator inside its reply.

The single-agent math workflow (`workflow.name=sa`, verl_masopd/workflows/single.py) with one
addition: the Reasoner may write `<calc>EXPR</calc>` anywhere in its reply. Generation stops at
"</calc>", the calculator evaluates EXPR, the observation ` <result>VALUE</result>` is appended
and generation goes on after it (verl_masopd/rollout/tool_loop.py; docs/workflows.md):

    y = g_1 ‖ o_1 ‖ g_2 ‖ o_2 ‖ … ‖ g_m        o_i = " <result>" + value(EXPR_i) + "</result>"

The g_i are generated, the o_i are context only: response mask 0, never trained on, never scored
by the teacher. As in the single-agent workflow the reply ends with the final answer
`#### <answer>`, which is what is judged: reward 0.2·format + 0.8·answer, team signal 1[ŷ ≡ y*].

EXPR is parsed with Python's `ast` and evaluated node by node; nothing is ever executed.
Accepted: int and float literals, + - * / // % **, unary - and +, parentheses. Each call's
outcome is recorded (and counted in the step's metrics as `rollout/tool/<outcome>`):
  ok         the value, integers exact, floats to 12 significant digits
  invalid    not an arithmetic expression (names, calls, strings, ...; over 200 characters)
  undefined  division by zero, a power with no real value
  too_large  an exponent over 100 in magnitude, or a value over 10^100
A reply makes at most `workflow.options.max_calls` calls (default 4); a further call ends the
reply and is recorded as "over_budget".

    python -m verl_masopd.train imports=[examples/calculator_agent.py] preset=cpu \
        workflow.name=calculator workflow.domain=math +workflow.options.max_calls=4 \
        algorithm.adv_estimator=grpo students.path=STUDENT data.train_files=[math.parquet]

(or `python examples/calculator_agent.py OVERRIDES`); the run saves `imports`, so
`python -m verl_masopd.eval --checkpoint RUN/checkpoints ...` plays this workflow again.
"""

import ast
import operator

from verl_masopd.workflows import register_workflow
from verl_masopd.workflows.base import Agent
from verl_masopd.workflows.math import REASONER
from verl_masopd.workflows.single import SingleAgentMathWorkflow
from verl_masopd.workflows.tools import OK, Observation, Tool

OPEN, CLOSE = "<calc>", "</calc>"
INVALID, UNDEFINED, TOO_LARGE = "invalid", "undefined", "too_large"
MAX_CHARS, MAX_EXPONENT, MAX_MAGNITUDE = 200, 100, 10**100

BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}

INSTRUCTION = (
    "You are an expert mathematician solving a math problem.\n"
    "Solve the problem by step-by-step mathematical reasoning. You have a calculator: write <calc>EXPR</calc> "
    "with an arithmetic expression EXPR (numbers, + - * / // % ** and parentheses) and its value follows as "
    "<result>VALUE</result>.\n"
    "If you are shown your previous output, check it carefully: revise your answer if it is wrong, keep it if it "
    "is right.\n"
    "End your reply with the final answer on its own line in the form `#### <answer>`."
)

COMPACT_INSTRUCTION = "Reasoner. Compute with <calc>2*3</calc>. Answer as #### n."


class CalculatorError(ValueError):
    """Why an expression has no value, with the outcome it is recorded as."""

    def __init__(self, message: str, outcome: str):
        super().__init__(message)
        self.outcome = outcome


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic expression; CalculatorError for anything else (module doc)."""
    if len(expression) > MAX_CHARS:
        raise CalculatorError(f"longer than {MAX_CHARS} characters", INVALID)
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError):  # ValueError: a null byte
        raise CalculatorError("not an arithmetic expression", INVALID) from None
    return _value(tree.body)


def _value(node: ast.expr) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _bounded(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in UNARY:
        return UNARY[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalculatorError(f"exponent over {MAX_EXPONENT}", TOO_LARGE)
        try:
            value = BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise CalculatorError("division by zero", UNDEFINED) from None
        except OverflowError:  # a float power past the float range
            raise CalculatorError("value over 10^100", TOO_LARGE) from None
        if isinstance(value, complex):  # (-8) ** 0.5
            raise CalculatorError("no real value", UNDEFINED)
        return _bounded(value)
    raise CalculatorError("not an arithmetic expression", INVALID)


def _bounded(value: int | float) -> int | float:
    if not abs(value) <= MAX_MAGNITUDE:  # inf and nan fail too
        raise CalculatorError("value over 10^100", TOO_LARGE)
    return value


class Calculator(Tool):
    """The call that ends the reply so far, `<calc>EXPR</calc>`, gives ` <result>VALUE</result>`,
    or ` <result>error: REASON</result>` with the outcome of the module doc."""

    name = "calculator"
    stop = (CLOSE,)

    def run(self, reply: str) -> Observation:
        before_close, _, _ = reply.rpartition(CLOSE)
        _, opened, expression = before_close.rpartition(OPEN)
        if not opened:
            return Observation(f" <result>error: no {OPEN} opens this call</result>", INVALID)
        try:
            value = evaluate(expression)
        except CalculatorError as e:
            return Observation(f" <result>error: {e}</result>", e.outcome)
        shown = str(value) if isinstance(value, int) else format(value, ".12g")
        return Observation(f" <result>{shown}</result>", OK)


class CalculatorWorkflow(SingleAgentMathWorkflow):
    """The single-agent math workflow whose Reasoner has the calculator (`max_calls` per reply)."""

    name = "calculator"
    instructions = {REASONER: INSTRUCTION}
    compact_instructions = {REASONER: COMPACT_INSTRUCTION}

    def __init__(self, agents_per_role: int = 1, horizon: int = 4, *, max_calls: int = 4, **options):
        super().__init__(agents_per_role, horizon, **options)
        self.calculator = Calculator(max_calls=max_calls)

    def tool(self, agent: Agent) -> Tool:
        return self.calculator


register_workflow(CalculatorWorkflow.name, CalculatorWorkflow.domain, CalculatorWorkflow)


if __name__ == "__main__":
    from verl_masopd.train import main

    main()
