"""The rollout beside the update: a thread plays the coming steps' rollouts while the trainer
scores, updates and syncs.

With bound k = rollout.max_off_policy ≥ 1, rollout t (the problems of step t) starts once the
trainer has synced the weights of step t − k: every policy's version is then at least t − k and
only grows while the rollout plays (each policy's backend receives its new weights as soon as
its own update ends, trainer/loop.py), so when step t trains, its policies at version t, no
sample lags by more than k (trainer/staleness.py enforces it again row by row). At most k + 1
rollouts are ahead of the trainer: the one it trains on and k in flight or waiting.

A thread, not a Ray actor: the generation backends (the rollout manager's event loop runs in the
thread through asyncio.run) stay in the trainer's process and receive new weights there without
a copy to another process; torch's generation and update kernels release the GIL, so they share
the cores. Backends that can take a policy's weights while the others generate:
- hf: a policy's weight load (`update_weights`) waits for the replies its own backend has in
  flight and lands between two of its batches, so no reply mixes versions
  (rollout/hf_batching.py); the model lock orders it between the other backends' decoding steps,
  so a policy's sync never stops another policy's generation for longer than the load;
- vllm with LoRA policies: the backends are clients of the standalone multi-LoRA servers
  (serving/adapter_policies.py), which generate in processes of their own; a sync loads one
  adapter in place between two engine steps while the other adapters' requests go on
  (serving/adapter_servers.py).
vllm with full fine-tuning has none: each policy's hybrid worker sleeps its servers through the
policy's update, so the config check refuses a bound >= 1 there (config/validate.py).

Checkpoints: rollouts in flight are dropped. Each finished rollout carries the data position after
its problems; the trainer saves the position of the last rollout it trained, so a resumed run
replays the dropped rollouts' problems with the checkpoint's weights (lag 0). The thread logs (INFO)
when each rollout starts and ends, named by the training step that trains it (1-based, the
checkpoint `global_step_<k>` written after it): "rollout of step k: playing" / "played in s".
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from verl_masopd.rollout.records import RolloutGroup

logger = logging.getLogger(__name__)


@dataclass
class Rollout:
    """One step's rollout: its groups, the rollout manager's and tools' metrics while it played,
    and the data position after its problems (ProblemStream.state_dict)."""

    groups: list[RolloutGroup]
    metrics: dict[str, float]
    position: dict


class BackgroundRollout:
    """Plays `play()` (the next batch of problems, one rollout) in a thread, rollout t once
    `synced(t - bound)` was called; `take(t)` waits for rollout t. Start at `first_step` (the step
    whose weights the backends hold now)."""

    def __init__(self, play: Callable[[], Rollout], bound: int, first_step: int):
        if bound < 1:
            raise ValueError(f"the rollout beside the update needs a staleness bound >= 1, got {bound}")
        self._play = play
        self._bound = bound
        self._synced = first_step
        self._next = first_step
        self._ready: dict[int, Rollout] = {}
        self._stop = False
        self._error: BaseException | None = None
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="background-rollout", daemon=True)
        self._thread.start()

    def synced(self, step: int) -> None:
        """Every policy's backend holds the weights of `step`: rollouts up to step + bound may start."""
        with self._changed:
            self._synced = step
            self._changed.notify_all()

    def take(self, step: int) -> Rollout:
        """Rollout `step`, once played; an error of the thread is raised here."""
        with self._changed:
            self._changed.wait_for(lambda: step in self._ready or self._error is not None)
            if step not in self._ready:
                raise RuntimeError(f"the background rollout failed before step {step}") from self._error
            return self._ready.pop(step)

    def close(self) -> None:
        """Stop after the rollout in flight (dropped with the ones waiting)."""
        with self._changed:
            self._stop = True
            self._changed.notify_all()
        self._thread.join()
        self._ready.clear()

    def _run(self) -> None:
        try:
            while True:
                with self._changed:
                    self._changed.wait_for(lambda: self._stop or self._next - self._bound <= self._synced)
                    if self._stop:
                        return
                    step = self._next
                logger.info("rollout of step %d: playing", step + 1)
                start = time.perf_counter()
                rollout = self._play()
                logger.info("rollout of step %d: played in %.2f s", step + 1, time.perf_counter() - start)
                with self._changed:
                    self._ready[step] = rollout
                    self._next += 1
                    self._changed.notify_all()
        except BaseException as e:  # raised to the trainer by `take`
            with self._changed:
                self._error = e
                self._changed.notify_all()
