"""The multi-agent systems as pure Python (no torch): roles, prompts, parsing, steps, rewards, attribution.

`make_workflow(name, domain, ...)` builds one: "mas" is the two-role system (code: Coder–Tester in
`code.py`, math: Reasoner–Tool-User in `math.py`), "sa" the single-agent baseline of `single.py`
(horizon 1: SA+ST, horizon T: SA+MT), "search" the Leader–Searchers–Answerer team of `search.py`
(qa). Workflow modules are imported on demand, so importing the
interface (`workflows.base`, `workflows.problem`) does not load the sandbox or math-verify.
`register_workflow(name, domain, cls)` adds a workflow written outside the package (see
examples/solver_verifier.py); the trainer then selects it with `workflow.name=<name>`. Its kind
(`workflow_kind`: "mas" with two or more roles, else "sa") decides which estimators serve it.
"""

from __future__ import annotations

import importlib
import inspect

from verl_masopd.workflows.base import Workflow

WORKFLOWS: dict[tuple[str, str], str | type[Workflow]] = {
    ("mas", "code"): "verl_masopd.workflows.code:CodeWorkflow",
    ("mas", "math"): "verl_masopd.workflows.math:MathWorkflow",
    ("sa", "code"): "verl_masopd.workflows.single:SingleAgentCodeWorkflow",
    ("sa", "math"): "verl_masopd.workflows.single:SingleAgentMathWorkflow",
    ("search", "qa"): "verl_masopd.workflows.search:SearchWorkflow",
}


def register_workflow(name: str, domain: str, cls: type[Workflow]) -> type[Workflow]:
    """Make `cls` the workflow `name` of `domain`; an existing (name, domain) is not replaced."""
    if not (isinstance(cls, type) and issubclass(cls, Workflow)):
        raise TypeError(f"register_workflow({name!r}, {domain!r}): {cls!r} is not a Workflow subclass")
    if (name, domain) in WORKFLOWS and WORKFLOWS[name, domain] is not cls:
        raise ValueError(f"workflow {name!r} ({domain}) is already registered")
    WORKFLOWS[name, domain] = cls
    return cls


def workflow_class(name: str, domain: str) -> type[Workflow]:
    """The class of workflow `name` ("mas" | "sa" | a registered one) for `domain` ("code" | "math")."""
    names = sorted({n for n, _ in WORKFLOWS})
    domains = sorted({d for _, d in WORKFLOWS})
    if name not in names:
        raise ValueError(f"workflow.name: unknown workflow {name!r} (known: {names})")
    if domain not in domains:
        raise ValueError(f"workflow.domain: unknown domain {domain!r} (known: {domains})")
    if (name, domain) not in WORKFLOWS:
        served = sorted(d for n, d in WORKFLOWS if n == name)
        raise ValueError(f"workflow.domain: workflow {name!r} serves {served}, not {domain!r}")
    entry = WORKFLOWS[name, domain]
    if isinstance(entry, type):
        return entry
    module, cls = entry.split(":")
    return getattr(importlib.import_module(module), cls)


def workflow_kind(name: str, domain: str) -> str:
    """The kind of a workflow: "mas" with two or more roles, "sa" with one."""
    return "mas" if len(workflow_class(name, domain).roles) > 1 else "sa"


def make_workflow(name: str, domain: str, agents_per_role: int = 1, horizon: int = 4, **options) -> Workflow:
    """The workflow `name` for `domain`, with `options` its keyword settings: timeout,
    reward_weights, shown_chars (all workflows); smoke_tests, float_tol (code). Unknown names,
    domains or options fail with the culprit named."""
    cls = workflow_class(name, domain)
    accepted = _keyword_options(cls)
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise ValueError(f"workflow {name!r} ({domain}): unknown option(s) {unknown} (known: {sorted(accepted)})")
    return cls(agents_per_role, horizon, **options)


def _keyword_options(cls: type) -> set[str]:
    """Keyword-only parameters of the initialisers along `cls`'s MRO (subclasses forward the rest)."""
    accepted: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is not None:
            params = inspect.signature(init).parameters.values()
            accepted |= {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
    return accepted


__all__ = ["WORKFLOWS", "make_workflow", "register_workflow", "workflow_class", "workflow_kind"]
