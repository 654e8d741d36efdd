"""One trainable policy: its verl engine (update, log-probs, checkpoints) and its generation backend.

The engine is verl's `TrainingWorker` (FSDP2) through `engine/policy_engine.py`; the generation backend
serves the rollout manager and receives the engine's weights after every update (`sync`), with
their version: the policy's own counter (`version`), which its samples record (trainer/staleness.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from verl import DataProto

from verl_masopd.engine.policy_engine import PolicyEngine
from verl_masopd.rollout.backend import GenerationBackend


class Policy:
    def __init__(self, name: str, engine: PolicyEngine, backend: GenerationBackend, loss_fn, num_mini_batches: int):
        if num_mini_batches < 1:
            raise ValueError(f"policy {name}: the number of mini-batches must be >= 1, got {num_mini_batches}")
        self.name = name
        self.engine = engine
        self.backend = backend
        self.loss_fn = loss_fn
        self.num_mini_batches = num_mini_batches
        self.version = 0  # the version of the weights the backend holds

    def update(self, batch: DataProto, temperature: float = 1.0) -> dict[str, float]:
        """One optimizer step per mini-batch: the rows are split into `num_mini_batches` contiguous
        chunks of near-equal size (episodes end at different turns, so row counts vary per step).
        The engine's log-probs are those of softmax(z / temperature), the distribution the rollout
        sampled from (`SamplingParams.log_prob_temperature`), as verl's actor takes them.

        Rows the estimator dropped (batch["trainable"] false, where present) and rows whose
        response mask is empty carry no gradient and are left out; with none left the update is
        skipped and counted.
        """
        keep = batch.batch["response_mask"].sum(-1).numpy() > 0
        if "trainable" in batch.batch.keys():
            keep &= batch.batch["trainable"].numpy()
        trainable = np.flatnonzero(keep)
        if not len(trainable):
            return {f"{self.name}/update_skipped": 1.0}
        metrics: dict[str, list[float]] = {"update_skipped": [0.0]}
        chunks = np.array_split(trainable, min(self.num_mini_batches, len(trainable)))
        for rows in chunks:
            out = self.engine.train_mini_batch(batch.select_idxs(rows), self.loss_fn, temperature=temperature)
            for key, value in out.items():
                metrics.setdefault(key, []).extend(value if isinstance(value, list) else [value])
        return {f"{self.name}/{key}": float(np.mean(values)) for key, values in metrics.items() if _numeric(values)}

    def sync(self, version: int) -> None:
        """Push the engine's current weights to the generation backend as `version`."""
        self.backend.update_weights(self.engine.hf_state_dict(), version)
        self.version = version

    def save(self, folder: Path, step: int) -> None:
        self.engine.save_checkpoint(folder, step)

    def load(self, folder: Path, step: int) -> None:
        self.engine.load_checkpoint(folder)
        self.sync(step)


class ServedPolicy(Policy):
    """A `Policy` whose weights reach its servers without a driver copy of the full weights: its
    backend's sync pulls what the servers load from the engine itself (verl's checkpoint engine,
    worker to server, or the adapter alone, serving/adapter_policies.py)."""

    def sync(self, version: int) -> None:
        self.backend.update_weights({}, version)
        self.version = version


def _numeric(values: list) -> bool:
    return all(isinstance(v, int | float) for v in values)
