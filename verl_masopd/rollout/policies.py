"""Which policy an agent's turns train: the `policy_sharing` setting.

"role": one policy per role (name = role, e.g. "coder"); "agent": one per agent (name = agent,
e.g. "coder_0"); "shared": a single policy named "shared" for every agent.
"""

from __future__ import annotations

from verl_masopd.workflows.base import Agent

SHARINGS = ("role", "agent", "shared")


def policy_of(agent: Agent, sharing: str) -> str:
    """The policy name that `agent` samples from and trains under `sharing`."""
    if sharing not in SHARINGS:
        raise ValueError(f"policy_sharing must be one of {SHARINGS}, got {sharing!r}")
    return {"role": agent.role, "agent": agent.name, "shared": "shared"}[sharing]


def policies_of(agents, sharing: str) -> list[str]:
    """The distinct policy names of `agents`, in seat order."""
    return list(dict.fromkeys(policy_of(a, sharing) for a in agents))
