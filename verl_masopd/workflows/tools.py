"""Tools an agent calls inside its reply: a retrieval, a program run, a calculator.

A workflow gives an agent a `Tool` (`Workflow.tool`). The agent's generation stops when its text
ends a call, i.e. contains one of `Tool.stop` (such as "</search>"); the rollout runs the tool on
the reply so far, appends the observation's tokens to the agent's sequence and generation goes on
after them, until the agent ends its reply or a budget is spent (docs/design.md, "Tools inside a
reply"):

    y = g_1 ‖ o_1 ‖ g_2 ‖ o_2 ‖ … ‖ g_m        g_i generated, o_i observations
    loss, teacher and generated-token counts see only the g_i (the response mask is 0 on every o_i)

`run` receives untrusted text and may fail in any way: an exception, a hang past `timeout_s` or an
observation longer than `max_observation_tokens` each becomes a recorded outcome of the call (and
an observation saying so), never an exception in the rollout. After `max_calls` calls the reply
ends at its next call, which is recorded as "over_budget" and gets no observation.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

OK, ERROR, TIMEOUT, TRUNCATED, OVER_BUDGET = "ok", "error", "timeout", "truncated", "over_budget"


@dataclass(frozen=True)
class Observation:
    """What a call returned: `text` is appended to the reply as it is; `outcome` is "ok" or the
    tool's own label for a failure it handled (e.g. "empty", "unreachable")."""

    text: str
    outcome: str = OK


class Tool(ABC):
    """One tool of a workflow. Subclasses set `name` and `stop` and implement `run`."""

    name: ClassVar[str]
    stop: ClassVar[tuple[str, ...]]

    def __init__(self, max_calls: int = 4, max_observation_tokens: int = 256, timeout_s: float = 10.0):
        if max_calls < 0:
            raise ValueError(f"tool {self.name!r}: max_calls must be >= 0, got {max_calls}")
        if max_observation_tokens < 1:
            raise ValueError(f"tool {self.name!r}: max_observation_tokens must be >= 1, got {max_observation_tokens}")
        if timeout_s <= 0:
            raise ValueError(f"tool {self.name!r}: timeout_s must be > 0, got {timeout_s}")
        if not self.stop or not all(self.stop):
            raise ValueError(f"tool {self.name!r} needs non-empty stop strings, got {self.stop!r}")
        self.max_calls = max_calls
        self.max_observation_tokens = max_observation_tokens
        self.timeout_s = timeout_s

    def call_end(self, text: str) -> int | None:
        """The end of the first call in `text` (the index after its stop string), or None."""
        ends = [text.find(s) + len(s) for s in self.stop if s in text]
        return min(ends) if ends else None

    @abstractmethod
    def run(self, reply: str) -> Observation:
        """The observation for the call that ends `reply` (the reply so far, ending at a stop string)."""

    def begin_step(self) -> None:
        """A training step starts: the tool drops what it keeps per step (default: nothing)."""
        return None

    def step_metrics(self) -> dict[str, float]:
        """The tool's own metrics since `begin_step`, logged as rollout/tool/<name>/<key> (default: none)."""
        return {}
