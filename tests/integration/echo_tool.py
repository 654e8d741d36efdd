"""A tool the untrained tiny model calls often (every "e" it writes ends a call), and the
single-agent math workflow whose Reasoner has it: responses with several calls from any backend."""

from verl_masopd.workflows import workflow_class
from verl_masopd.workflows.tools import Observation, Tool


class Echo(Tool):
    name = "echo"
    stop = ("e",)

    def run(self, reply: str) -> Observation:
        return Observation(f" [seen {len(reply)}] ")


class EchoingReasoner(workflow_class("sa", "math")):
    def tool(self, agent):
        return Echo(max_calls=3)
