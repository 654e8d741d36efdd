"""Attribution a^t of every conflict turn t that another turn follows (docs/method.md, "PAC").

`pac.attribution: rules` asks the workflow (`Workflow.attribute`). `pac.attribution: model`
makes one model call per conflict turn, serving every agent of that turn: the model gets the
problem, the reference and all the turn's outputs, and answers one JSON object mapping each
agent name to "correct" or "wrong"; decisions follow (correct → hold, wrong → revise). The model
locates, the verifier decides (docs/method.md, "Decisions on points the sources leave open"):
wherever the rules have a verifier fact for an agent (its answer against the reference, its
program against the golden tests), that fact is the verdict, and a model verdict contradicting it
is overridden and counted (`overrides`); the model's verdict stands only where no fact exists. A
turn whose problem has no reference, or whose answer cannot be parsed, falls back to the rules,
and each fallback is counted with its reason.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from verl_masopd.rollout.backend import GenerationBackend, SamplingParams
from verl_masopd.teacher.privileged import reference_text
from verl_masopd.tokens.chat import encode_messages
from verl_masopd.workflows.base import HOLD, REVISE, Attribution, Episode, Workflow

ROUTES = ("rules", "model")
NO_REFERENCE = "no reference"
NO_JSON = "no JSON object"
MISSING_VERDICT = "missing agent verdict"
BAD_VERDICT = "verdict not 'correct' or 'wrong'"

ATTRIBUTION_SYSTEM = (
    "You check the outputs of a multi-agent system against a reference. For every agent, say "
    "whether its output at this turn is correct. Answer with one JSON object that maps each agent "
    'name to "correct" or "wrong", and nothing else.'
)


@dataclass
class Attributions:
    """a^t by (episode_id, t) for conflict turns, and what it took to get them.

    `model_calls`: model prompts sent; `fallbacks[reason]`: turns the model route left to the rules;
    `overrides`: model verdicts replaced by the verifier fact they contradicted;
    `incomplete`: attributions with a check that could not run (they give no privileged block).
    """

    by_turn: dict[tuple[str, int], Attribution] = field(default_factory=dict)
    model_calls: int = 0
    fallbacks: Counter = field(default_factory=Counter)
    overrides: int = 0

    @property
    def incomplete(self) -> int:
        return sum(not a.complete for a in self.by_turn.values())

    def merge(self, other: Attributions) -> Attributions:
        """The attributions of two sets of episodes attributed apart, with their counts added."""
        return Attributions(
            {**self.by_turn, **other.by_turn},
            self.model_calls + other.model_calls,
            self.fallbacks + other.fallbacks,
            self.overrides + other.overrides,
        )

    def previous(self, episode_id: str, turn: int) -> Attribution | None:
        """a^{turn−1}, the attribution that conditions the teacher context of `turn`."""
        return self.by_turn.get((episode_id, turn - 1))


class Attributor:
    """Runs the configured route over a step's episodes (`Mapping[episode_id, Episode]`)."""

    def __init__(
        self,
        workflow: Workflow,
        route: str = "rules",
        backend: GenerationBackend | None = None,
        tokenizer=None,
        sampling: SamplingParams = SamplingParams(top_k=1, max_new_tokens=512),
    ):
        if route not in ROUTES:
            raise ValueError(f"pac.attribution must be one of {ROUTES}, got {route!r}")
        if route == "model" and (backend is None or tokenizer is None):
            raise ValueError("pac.attribution=model needs an attribution model backend and its tokenizer")
        self.workflow = workflow
        self.route = route
        self.backend = backend
        self.tokenizer = tokenizer
        self.sampling = sampling

    async def attribute(self, episodes: Mapping[str, Episode]) -> Attributions:
        result = Attributions()
        conflicts = [
            (eid, t) for eid, ep in episodes.items() for t in range(len(ep.turns) - 1) if not ep.turns[t].agreed
        ]
        asked = []
        for eid, t in conflicts:
            if self.route == "model" and reference_text(episodes[eid].problem) is not None:
                asked.append((eid, t))
            else:
                if self.route == "model":
                    result.fallbacks[NO_REFERENCE] += 1
                self._rules(episodes[eid], eid, t, result)
        if not asked:
            return result
        prompts = [encode_messages(self.tokenizer, attribution_messages(episodes[eid], t)) for eid, t in asked]
        generations = await self.backend.generate(prompts, self.sampling)
        result.model_calls += len(prompts)
        for (eid, t), gen in zip(asked, generations, strict=True):
            episode = episodes[eid]
            text = self.tokenizer.decode(gen.token_ids, skip_special_tokens=True)
            verdicts, reason = parse_verdicts(text, [a.name for a in episode.agents])
            if verdicts is None:
                result.fallbacks[reason] += 1
                self._rules(episode, eid, t, result)
            else:
                verdicts, overridden = verifier_wins(verdicts, self.workflow.attribute(episode, t))
                result.overrides += overridden
                decisions = {name: HOLD if ok else REVISE for name, ok in verdicts.items()}
                result.by_turn[(eid, t)] = Attribution(turn=t, verdicts=verdicts, decisions=decisions, source="model")
        return result

    def _rules(self, episode: Episode, eid: str, t: int, result: Attributions) -> None:
        attribution = self.workflow.attribute(episode, t)
        if attribution is not None:
            result.by_turn[(eid, t)] = attribution


def verifier_wins(verdicts: dict[str, bool], facts: Attribution | None) -> tuple[dict[str, bool], int]:
    """The model's `verdicts` with every verifier fact of `facts` (the rules' verdicts that are not
    None) put in their place, and how many model verdicts those facts contradicted."""
    known = {} if facts is None else {name: ok for name, ok in facts.verdicts.items() if ok is not None}
    overridden = sum(name in known and known[name] != ok for name, ok in verdicts.items())
    return {name: known.get(name, ok) for name, ok in verdicts.items()}, overridden


def attribution_messages(episode: Episode, turn: int) -> list[dict]:
    """The attribution model's prompt for turn `turn`: problem, reference, every agent's output, report."""
    reference = reference_text(episode.problem)
    if reference is None:
        raise ValueError(f"problem {episode.problem.uid} has no reference for the attribution model")
    record = episode.turns[turn]
    parts = [f"Problem:\n{episode.problem.statement}", reference]
    for agent in episode.agents:
        action = record.actions.get(agent.name)
        parts.append(f"Output of {agent.name} ({agent.role}):\n{action.text if action else '(no output)'}")
    if record.report:
        parts.append(f"Execution report:\n{record.report}")
    template = ", ".join(f'"{a.name}": "correct" or "wrong"' for a in episode.agents)
    parts.append(f"Answer with one JSON object: {{{template}}}")
    return [{"role": "system", "content": ATTRIBUTION_SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


def parse_verdicts(text: str, agents: list[str]) -> tuple[dict[str, bool] | None, str]:
    """(verdict per agent, "") from the first JSON object in `text`, or (None, reason) when unusable."""
    obj = _first_json_object(text)
    if obj is None:
        return None, NO_JSON
    verdicts = {}
    for name in agents:
        if name not in obj:
            return None, MISSING_VERDICT
        value = obj[name]
        word = value.strip().lower() if isinstance(value, str) else None
        if word not in ("correct", "wrong"):
            return None, BAD_VERDICT
        verdicts[name] = word == "correct"
    return verdicts, ""


def _first_json_object(text: str) -> dict | None:
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            obj, _ = decoder.raw_decode(text, start)
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            return obj
        start = text.find("{", start + 1)
    return None
