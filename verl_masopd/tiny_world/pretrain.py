"""Deterministic pretraining of the tiny world's teacher and student on demonstrations (CPU).

One run from `seed`: a Qwen3-architecture model of `WORLD_SIZE` (~0.33M parameters, the
project's byte-level tokenizer; at a fixed CPU budget the smallest of the probed sizes learnt the
most; the search world's `SEARCH_DEEP_SIZE` is ~0.73M, its earlier `SEARCH_SIZE` ~0.46M; all
`SIZES` have heads of 32, as vLLM's CPU attention needs) learns replies given contexts,
with the loss on reply tokens only,

    L(θ) = − Σ_{(x, y) ∈ batch} Σ_{k ∈ T(y)} log π_θ(y_k | x, y_<k) / Σ_{(x, y) ∈ batch} |T(y)|,

T(y) the reply's generated positions (all of them but the tool observations inside a reply), on a
fresh batch of demonstrations every step (AdamW, linear warm-up then cosine decay to a tenth,
bf16 autocast, or float32 with `precision="fp32"`: on a CPU without bf16 instructions, AVX2
only, a float32 step is ~7x faster than an emulated bf16 one). The run's state after `steps` is
the teacher. The student continues from it for
`student_steps` more on the student's demonstrations (the same tasks with a share
`role_confusion` of one role's replies in the other role's format) at the constant rate
`student_lr`: the teacher's knowledge with a role confusion that keeps it clearly below the
teacher. Step-based on a fixed number of threads, so the same seed and schedule give the same
weights on the same software stack.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import torch
from tqdm import tqdm
from transformers import Qwen3ForCausalLM

from verl_masopd.tiny_world.models import new_model
from verl_masopd.tokens.chat import encode_messages

IGNORE = -100
WORLD_SIZE = dict(
    hidden_size=64,
    intermediate_size=256,
    num_hidden_layers=4,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=32,
)
# the search world's earlier size, ~0.46M parameters
SEARCH_SIZE = dict(
    hidden_size=96,
    intermediate_size=256,
    num_hidden_layers=4,
    num_attention_heads=3,
    num_key_value_heads=1,
    head_dim=32,
)
# deeper, and a key/value head per query head (~0.73M parameters): room for the attention that
# copies a fact out of the right one of several retrieved passages; the search world's shipped size
SEARCH_DEEP_SIZE = dict(SEARCH_SIZE, num_hidden_layers=6, num_key_value_heads=3)
SIZES = {"world": WORLD_SIZE, "search": SEARCH_SIZE, "search-deep": SEARCH_DEEP_SIZE}
PRECISIONS = ("bf16", "fp32")


@dataclass(frozen=True)
class Schedule:
    steps: int
    student_steps: int
    role_confusion: float
    batch_size: int = 8
    lr: float = 2e-3
    student_lr: float = 3e-4
    warmup: int = 50
    weight_decay: float = 0.01
    threads: int = 1
    precision: str = "bf16"

    def __post_init__(self):
        if self.steps <= self.warmup or self.student_steps < 1:
            raise ValueError(f"need steps > warmup={self.warmup} and student_steps >= 1, got {self}")
        if not 0 <= self.role_confusion <= 1:
            raise ValueError(f"role_confusion must lie in [0, 1], got {self.role_confusion}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")

    def lr_at(self, step: int) -> float:
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        progress = (step - self.warmup) / max(1, self.steps - self.warmup)
        return self.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))


def reply_tokens(tokenizer, demo) -> tuple[list[int], list[int]]:
    """A demonstration's reply ids and labels, ending in the end-of-reply token. A demonstration
    with `segments` ((token ids, trained) pieces: generated text and tool observations, encoded
    each on its own as the rollout does) has its untrained pieces' labels ignored; otherwise the
    whole reply is trained."""
    segments = getattr(demo, "segments", None) or ((tokenizer.encode(demo.reply, add_special_tokens=False), True),)
    ids, labels = [], []
    for piece, trained in segments:
        ids += piece
        labels += piece if trained else [IGNORE] * len(piece)
    return ids + [tokenizer.eos_token_id], labels + [tokenizer.eos_token_id]


def collate(tokenizer, demonstrations) -> dict[str, torch.Tensor]:
    """Right-padded input ids, attention mask and labels (context and observation positions ignored)."""
    rows = []
    for demo in demonstrations:
        context = encode_messages(tokenizer, demo.messages)
        reply, labels = reply_tokens(tokenizer, demo)
        rows.append((context + reply, [IGNORE] * len(context) + labels))
    width = max(len(ids) for ids, _ in rows)
    pad = tokenizer.pad_token_id
    return {
        "input_ids": torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in rows]),
        "attention_mask": torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in rows]),
        "labels": torch.tensor([labels + [IGNORE] * (width - len(labels)) for _, labels in rows]),
    }


Draw = Callable[[random.Random], object]
BUCKETED_BATCHES = 8


def length_buckets(tokenizer, draw: Draw, rng: random.Random, batch_size: int) -> list[dict[str, torch.Tensor]]:
    """BUCKETED_BATCHES batches of demonstrations of similar length (drawn together, sorted by
    length, cut into batches, shuffled): little padding, the same demonstrations."""
    demonstrations = sorted(
        (draw(rng) for _ in range(BUCKETED_BATCHES * batch_size)),
        key=lambda d: len(encode_messages(tokenizer, d.messages)) + len(d.reply),
    )
    batches = [demonstrations[k : k + batch_size] for k in range(0, len(demonstrations), batch_size)]
    rng.shuffle(batches)
    return [collate(tokenizer, batch) for batch in batches]


def pretrain(
    tokenizer,
    draw: Draw,
    draw_student: Draw,
    schedule: Schedule,
    seed: int,
    on_checkpoint: Callable[[str, Qwen3ForCausalLM, int], None],
    size: dict = WORLD_SIZE,
    snapshot_every: int = 0,
    on_state: Callable[[dict], None] | None = None,
    state_every: int = 0,
    resume: dict | None = None,
) -> list[float]:
    """Train the teacher, then the student from it; calls on_checkpoint("teacher", model, steps),
    ("student", model, steps + student_steps) and, with snapshot_every = k > 0, (f"step{s}", model,
    s) at every teacher step s divisible by k. With on_state and state_every = k (a multiple of
    BUCKETED_BATCHES, where no drawn batch is pending), on_state gets the run's state before every
    teacher step s > 0 divisible by k: {"step", "model", "optimizer", "rng", "torch_rng", "losses"};
    `resume`, such a state, continues the run from its step with the weights of a run never
    stopped. Returns every step's loss."""
    if state_every % BUCKETED_BATCHES:
        raise ValueError(f"state_every must be a multiple of {BUCKETED_BATCHES}, got {state_every}")
    torch.set_num_threads(schedule.threads)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    model = new_model(tokenizer, size, seed, max_positions=1024)
    optimizer = torch.optim.AdamW(model.parameters(), lr=schedule.lr, weight_decay=schedule.weight_decay)
    losses, start = [], 0
    if resume is not None:
        model.load_state_dict(resume["model"])
        optimizer.load_state_dict(resume["optimizer"])
        rng.setstate(resume["rng"])
        torch.set_rng_state(resume["torch_rng"])
        losses, start = list(resume["losses"]), resume["step"]
    model.train()

    pools: dict[Draw, list] = {}

    def step(demonstrations: Draw, lr: float) -> None:
        for group in optimizer.param_groups:
            group["lr"] = lr
        pool = pools.setdefault(demonstrations, [])
        if not pool:
            pool.extend(length_buckets(tokenizer, demonstrations, rng, schedule.batch_size))
        batch = pool.pop()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=schedule.precision == "bf16"):
            loss = model(**batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())

    def state(s: int) -> dict:
        return {
            "step": s,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "rng": rng.getstate(),
            "torch_rng": torch.get_rng_state(),
            "losses": list(losses),
        }

    total = schedule.steps + schedule.student_steps
    with tqdm(total=total, initial=start, desc="pretraining teacher", unit="step") as bar:
        for s in range(start, schedule.steps):
            if on_state is not None and state_every and s > start and s % state_every == 0:
                on_state(state(s))
            if snapshot_every and s and s % snapshot_every == 0:
                on_checkpoint(f"step{s}", model, s)
            step(draw, schedule.lr_at(s))
            bar.update()
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
        on_checkpoint("teacher", model, schedule.steps)
        bar.set_description("pretraining student")
        for _ in range(schedule.student_steps):
            step(draw_student, schedule.student_lr)
            bar.update()
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    on_checkpoint("student", model, schedule.steps + schedule.student_steps)
    return losses
