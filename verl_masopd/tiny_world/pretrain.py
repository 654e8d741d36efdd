"""Deterministic pretraining of the tiny world's teacher and student on demonstrations (CPU).

One run from `seed`: a Qwen3-architecture model of `WORLD_SIZE` (~0.33M parameters, the
project's byte-level tokenizer; at a fixed CPU budget the smallest of the probed sizes learnt the
most) learns replies given contexts, with the loss on reply tokens only,

    L(θ) = − Σ_{(x, y) ∈ batch} Σ_k log π_θ(y_k | x, y_<k) / Σ_{(x, y) ∈ batch} |y|,

on a fresh batch of demonstrations every step (AdamW, linear warm-up then cosine decay to a tenth,
bf16 autocast). The run's state at `student_step` is the student (an early checkpoint: clearly
above zero, clearly below the teacher), its state at the last step the teacher. Step-based, so the
same seed and steps give the same weights on the same software stack.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import torch
from tqdm import tqdm
from transformers import Qwen3ForCausalLM

from verl_masopd.chat import encode_messages
from verl_masopd.tiny_models import new_model

IGNORE = -100
WORLD_SIZE = dict(
    hidden_size=64,
    intermediate_size=256,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
)


@dataclass(frozen=True)
class Schedule:
    steps: int
    student_step: int
    batch_size: int = 32
    lr: float = 2e-3
    warmup: int = 50
    weight_decay: float = 0.01

    def __post_init__(self):
        if not 0 < self.student_step < self.steps:
            raise ValueError(f"student_step must lie in (0, steps={self.steps}), got {self.student_step}")

    def lr_at(self, step: int) -> float:
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        progress = (step - self.warmup) / max(1, self.steps - self.warmup)
        return self.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))


def collate(tokenizer, demonstrations) -> dict[str, torch.Tensor]:
    """Right-padded input ids, attention mask and labels (context positions ignored)."""
    rows = []
    for demo in demonstrations:
        context = encode_messages(tokenizer, demo.messages)
        reply = tokenizer.encode(demo.reply, add_special_tokens=False) + [tokenizer.eos_token_id]
        rows.append((context + reply, [IGNORE] * len(context) + reply))
    width = max(len(ids) for ids, _ in rows)
    pad = tokenizer.pad_token_id
    return {
        "input_ids": torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in rows]),
        "attention_mask": torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in rows]),
        "labels": torch.tensor([labels + [IGNORE] * (width - len(labels)) for _, labels in rows]),
    }


def pretrain(
    tokenizer,
    draw: Callable[[random.Random], object],
    schedule: Schedule,
    seed: int,
    on_checkpoint: Callable[[str, Qwen3ForCausalLM, int], None],
    size: dict = WORLD_SIZE,
    snapshot_every: int = 0,
) -> list[float]:
    """Train one model; calls on_checkpoint("student", model, step), ("teacher", model, steps) and,
    with snapshot_every = k > 0, (f"step{s}", model, s) at every step s divisible by k (to calibrate
    the student step). Runs on one torch thread: the same result on any machine, and on a loaded
    2-core machine faster than two threads that wait for each other. Returns every step's loss."""
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    model = new_model(tokenizer, size, seed, max_positions=1024)
    optimizer = torch.optim.AdamW(model.parameters(), lr=schedule.lr, weight_decay=schedule.weight_decay)
    losses = []
    model.train()
    with tqdm(range(schedule.steps), desc="pretraining", unit="step") as bar:
        for step in bar:
            if step == schedule.student_step:
                on_checkpoint("student", model, step)
            if snapshot_every and step and step % snapshot_every == 0:
                on_checkpoint(f"step{step}", model, step)
            for group in optimizer.param_groups:
                group["lr"] = schedule.lr_at(step)
            batch = collate(tokenizer, [draw(rng) for _ in range(schedule.batch_size)])
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(**batch).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            losses.append(loss.item())
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    on_checkpoint("teacher", model, schedule.steps)
    return losses
