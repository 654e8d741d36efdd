"""MARFT's centralised critic: a frozen LM encoder (the backbone) and a trainable MLP value head.

    h(o)  = last-layer hidden state of the last token of observation o (the agent's prompt)
    V(o)  = W_2 · relu(W_1 · h(o) + b_1) + b_2          hidden size algorithm.marft.critic_hidden (64)
    V^clip(o_a) = V_old(o_a) + clip(V(o_a) − V_old(o_a), −ε_V, ε_V)      ε_V = algorithm.marft.value_clip (0.2)
    L_V   = value_coef · mean_a max(Huber_δ(V(o_a) − return_a), Huber_δ(V^clip(o_a) − return_a))

V_old are the values the advantages were computed from (the head before this step's update);
value_clip null drops the clipped term (plain Huber).

The head's initial weights come from `seed` (the trainer's trainer.seed), so a run repeats.
Only the head is trained (Adam, lr algorithm.marft.critic_lr 1e-5, gradient norm clipped to
algorithm.marft.max_grad_norm 0.5); the encoder runs without gradients, so observations are
encoded once per batch. `state_dict()` holds the head and its optimizer: that is the checkpoint.
"""

from typing import Any

import torch
from torch import nn
from transformers import AutoModel, PreTrainedModel

from verl_masopd.algos.marft import MarftOptions
from verl_masopd.tokens.layout import position_ids


class ValueHead(nn.Module):
    def __init__(self, input_size: int, hidden: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(input_size, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.mlp(features).squeeze(-1)


def huber_value_loss(
    values: torch.Tensor,
    returns: torch.Tensor,
    delta: float = 1.0,
    old_values: torch.Tensor | None = None,
    clip: float | None = None,
) -> torch.Tensor:
    """mean_a Huber_δ(V_a − return_a), or with `old_values` and `clip` the clipped form
    mean_a max(Huber_δ(V_a − return_a), Huber_δ(V_old,a + clip(V_a − V_old,a, −ε, ε) − return_a))."""
    loss = nn.functional.huber_loss(values, returns, delta=delta, reduction="none")
    if clip is not None:
        clipped = old_values + (values - old_values).clamp(-clip, clip)
        loss = torch.maximum(loss, nn.functional.huber_loss(clipped, returns, delta=delta, reduction="none"))
    return loss.mean()


class MarftCritic:
    """V(o) from a frozen encoder's last-token hidden state; the head is the only trained part."""

    def __init__(self, encoder: PreTrainedModel, options: MarftOptions, seed: int = 0):
        self.encoder = encoder.eval().requires_grad_(False)
        self.options = options
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.head = ValueHead(encoder.config.hidden_size, options.critic_hidden)
        self.optimizer = torch.optim.Adam(self.head.parameters(), lr=options.critic_lr)

    @classmethod
    def from_pretrained(
        cls, model_path: str, options: MarftOptions, seed: int = 0, dtype: torch.dtype = torch.float32
    ) -> "MarftCritic":
        return cls(AutoModel.from_pretrained(model_path, dtype=dtype), options, seed)

    @torch.no_grad()
    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """h(o) for left- or right-padded observations, [B, H] in float32."""
        mask = attention_mask.long()
        positions = position_ids(mask)
        hidden = self.encoder(input_ids=input_ids, attention_mask=mask, position_ids=positions).last_hidden_state
        last = mask.cumsum(dim=-1).argmax(dim=-1)
        return hidden[torch.arange(hidden.shape[0]), last].float()

    def values(self, features: torch.Tensor) -> torch.Tensor:
        """V(o) for encoded observations, [B] (no gradient)."""
        with torch.no_grad():
            return self.head(features)

    def update(
        self, features: torch.Tensor, returns: torch.Tensor, old_values: torch.Tensor, num_mini_batches: int = 1
    ) -> dict[str, float]:
        """One pass of L_V over encoded observations, their GAE returns and the values the returns
        were computed from: one optimiser step per contiguous chunk of `num_mini_batches`, as the
        actor's update (the value clip binds from the second step on)."""
        self.head.train()
        losses, grad_norms = [], []
        for rows in torch.arange(len(features)).tensor_split(min(num_mini_batches, len(features))):
            loss = self.options.value_coef * huber_value_loss(
                self.head(features[rows]),
                returns[rows].float(),
                self.options.huber_delta,
                old_values[rows].float(),
                self.options.value_clip,
            )
            self.optimizer.zero_grad()
            loss.backward()
            grad_norms.append(torch.nn.utils.clip_grad_norm_(self.head.parameters(), self.options.max_grad_norm).item())
            self.optimizer.step()
            losses.append(loss.item())
        return {"critic/value_loss": sum(losses) / len(losses), "critic/grad_norm": sum(grad_norms) / len(grad_norms)}

    def state_dict(self) -> dict[str, Any]:
        return {"head": self.head.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.head.load_state_dict(state["head"])
        self.optimizer.load_state_dict(state["optimizer"])
