"""MARFT: GAE over the (turn, agent) chain, the action-level loss, the critic (tiny real Qwen3)."""

import math

import numpy as np
import pytest
import torch
from transformers import Qwen3Config, Qwen3Model
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.workers.config import FSDPActorConfig

from verl_masopd.algos.marft import MarftOptions, chain_gae, compute_marft_advantage
from verl_masopd.algos.marft_critic import MarftCritic, huber_value_loss
from verl_masopd.rollout.episode_rows import EpisodeRows


def test_single_turn_bootstraps_only_within_the_turn():
    # agents coder_0, tester_0 at one turn: r = [0, 1], V = [0.5, 0.2], γ 0.9, λ 0.8
    # last agent: δ = 1 − 0.2 = 0.8 (no next turn) ; first: δ = 0 + 0.9·0.2 − 0.5 = −0.32
    # Â = [−0.32 + 0.72·0.8, 0.8] = [0.256, 0.8]
    assert chain_gae([0.0, 1.0], [0.5, 0.2], 0.9, 0.8) == pytest.approx([0.256, 0.8])


def test_last_agent_of_a_turn_bootstraps_from_the_next_turns_first_agent():
    rows = {  # (turn, agent): (reward, value), shuffled order, agents sorted naturally per turn
        (1, "tester_0"): (1.0, 0.0),
        (0, "tester_0"): (0.0, 1.0),
        (1, "coder_0"): (0.0, 0.5),
        (0, "coder_0"): (0.0, 2.0),
    }
    keys = list(rows)
    rewards = torch.tensor([[0.0, rows[k][0]] for k in keys])
    values = torch.tensor([rows[k][1] for k in keys])
    advantages, returns = compute_marft_advantage(
        rewards,
        torch.ones(4, 2),
        {"marft": {"gamma": 0.5, "lam": 1.0, "normalize_advantages": False}},
        critic_values=values,
        episodes=EpisodeRows((((0, 1, 2, 3),),)),
        turn=np.array([k[0] for k in keys], dtype=object),
        role=np.array([k[1].split("_")[0] for k in keys], dtype=object),
        agent_index=np.array([0] * 4, dtype=object),
    )
    # chain (0,c) (0,t) (1,c) (1,t), γ = 0.5, λ = 1:
    # (1,t): δ = 1 − 0 = 1 → Â 1
    # (1,c): δ = 0 + 0.5·0 − 0.5 = −0.5 → Â −0.5 + 0.5·1 = 0
    # (0,t): δ = 0 + 0.5·0.5 − 1 = −0.75 (last agent, m = 1) → Â −0.75 + 0.5·0 = −0.75
    # (0,c): δ = 0 + 0.5·1 − 2 = −1.5 → Â −1.5 + 0.5·(−0.75) = −1.875
    expected = {(1, "tester_0"): 1.0, (0, "tester_0"): -0.75, (1, "coder_0"): 0.0, (0, "coder_0"): -1.875}
    assert torch.allclose(advantages[:, 1], torch.tensor([expected[k] for k in keys]))
    assert torch.allclose(returns[:, 0], torch.tensor([expected[k] + rows[k][1] for k in keys]))


def test_agents_are_chained_in_index_order_and_episodes_apart():
    advantages, _ = compute_marft_advantage(
        torch.tensor([[0.0], [0.0], [1.0]]),
        torch.ones(3, 1),
        {"marft": {"gamma": 1.0, "lam": 1.0, "normalize_advantages": False}},
        critic_values=torch.zeros(3),
        episodes=EpisodeRows((((0, 1), (2,)),)),
        turn=np.array([0, 0, 0], dtype=object),
        role=np.array(["coder"] * 3, dtype=object),
        agent_index=np.array([10, 2, 10], dtype=object),
    )
    # e: coder_2 → coder_10 (reward 0 both) ; f stands alone with reward 1
    assert torch.allclose(advantages[:, 0], torch.tensor([0.0, 0.0, 1.0]))


def test_advantages_are_normalised_over_the_batch_returns_are_not():
    advantages, returns = compute_marft_advantage(
        torch.tensor([[1.0], [3.0]]),
        torch.ones(2, 1),
        None,
        critic_values=torch.zeros(2),
        episodes=EpisodeRows((((0,),), ((1,),))),
        turn=np.array([0, 0], dtype=object),
        role=np.array(["coder", "coder"], dtype=object),
        agent_index=np.array([0, 0], dtype=object),
    )
    assert torch.allclose(returns[:, 0], torch.tensor([1.0, 3.0]))
    assert torch.allclose(advantages[:, 0], torch.tensor([-1 / math.sqrt(2), 1 / math.sqrt(2)]), atol=1e-6)


def test_huber_value_loss():
    # errors 0.5 (quadratic: 0.125) and 3 (linear: 3 − 0.5 = 2.5) → mean 1.3125
    assert huber_value_loss(torch.tensor([0.0, 3.0]), torch.tensor([0.5, 0.0])).item() == pytest.approx(1.3125)


def test_clipped_value_loss_takes_the_larger_of_the_two_terms():
    values, returns, old = torch.tensor([0.0, 3.0]), torch.tensor([0.5, 0.0]), torch.tensor([0.1, 1.0])
    # clipped values: 0.1 + clip(−0.1) = 0.0 and 1.0 + clip(2.0, ±0.2) = 1.2; losses 0.125 and 0.7;
    # the max per action: 0.125 and max(2.5, 0.7) = 2.5 → 1.3125, the clip binds nowhere
    assert huber_value_loss(values, returns, 1.0, old, 0.2).item() == pytest.approx(1.3125)
    # V moved away from a return it had right: clipped V = 0.5 + 0.2 = 0.7, Huber 0.02 < 0.045
    pulled = huber_value_loss(torch.tensor([0.8]), torch.tensor([0.5]), 1.0, torch.tensor([0.5]), 0.2)
    assert pulled.item() == pytest.approx(0.5 * 0.3**2)
    # V moved past the return: clipped V = 2.0 − 0.2 = 1.8, Huber(0.8) = 0.32 > Huber(0.5) = 0.125
    held = huber_value_loss(torch.tensor([0.5]), torch.tensor([1.0]), 1.0, torch.tensor([2.0]), 0.2)
    assert held.item() == pytest.approx(0.5 * 0.8**2)
    value = torch.tensor([0.5], requires_grad=True)
    huber_value_loss(value, torch.tensor([1.0]), 1.0, torch.tensor([2.0]), 0.2).backward()
    assert value.grad.item() == 0.0, "past the clip the value gets no gradient"


def actor_config():
    return FSDPActorConfig(
        strategy="fsdp", ppo_mini_batch_size=2, ppo_micro_batch_size_per_gpu=1, rollout_n=1, clip_ratio=0.2
    )


def test_action_level_ratio_uses_token_normalised_log_probs():
    loss_fn = get_policy_loss_fn("marft")
    log_prob = torch.tensor([[-1.0, -3.0], [-1.0, -9.0]])
    old_log_prob = torch.tensor([[-2.0, -2.0], [-1.5, 5.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    advantages = torch.tensor([[2.0, 2.0], [1.0, 0.0]])
    loss, metrics = loss_fn(old_log_prob, log_prob, advantages, mask, "token-mean", actor_config())
    # row 0: mean log-probs equal → ρ 1 → −2 ; row 1: ρ = e^0.5 > 1.2 → clipped: −1.2 ; mean −1.6
    assert loss.item() == pytest.approx(-1.6)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(0.5)
    assert metrics["actor/ppo_kl"] == pytest.approx(-0.25)


def tiny_encoder():
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=50,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        max_position_embeddings=64,
    )
    return Qwen3Model(config).eval()


def test_critic_reads_the_last_observation_token_whatever_the_padding():
    critic = MarftCritic(tiny_encoder(), MarftOptions(critic_hidden=4))
    plain = critic.encode(torch.tensor([[5, 6, 7]]), torch.ones(1, 3))
    left_padded = critic.encode(torch.tensor([[0, 0, 5, 6, 7]]), torch.tensor([[0, 0, 1, 1, 1]]))
    assert plain.shape == (1, 16)
    assert torch.allclose(plain, left_padded, atol=1e-5)


def test_critic_takes_one_optimiser_step_per_mini_batch_like_the_actor():
    critic = MarftCritic(tiny_encoder(), MarftOptions(critic_hidden=8, critic_lr=1e-2))
    features = critic.encode(torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]]), torch.ones(3, 3))
    old_values = critic.values(features)
    critic.update(features, torch.tensor([1.0, -1.0, 0.5]), old_values, num_mini_batches=2)
    assert {int(state["step"]) for state in critic.optimizer.state.values()} == {2}
    critic.update(features, torch.tensor([1.0, -1.0, 0.5]), critic.values(features), num_mini_batches=8)
    assert {int(state["step"]) for state in critic.optimizer.state.values()} == {5}, "at most one per row"


def test_critic_trains_only_its_head_and_checkpoints_it():
    options = MarftOptions(critic_hidden=8, critic_lr=1e-2)
    critic = MarftCritic(tiny_encoder(), options)
    encoder_before = {k: v.clone() for k, v in critic.encoder.state_dict().items()}
    features = critic.encode(torch.tensor([[1, 2, 3], [4, 5, 6]]), torch.ones(2, 3))
    returns = torch.tensor([1.0, -1.0])
    first = critic.update(features, returns, critic.values(features))["critic/value_loss"]
    for _ in range(30):
        last = critic.update(features, returns, critic.values(features))
    assert last["critic/value_loss"] < first
    assert all(torch.equal(v, encoder_before[k]) for k, v in critic.encoder.state_dict().items())

    state = critic.state_dict()
    assert set(state["head"]) == {"mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias"}
    restored = MarftCritic(tiny_encoder(), options)
    restored.load_state_dict(state)
    assert torch.equal(restored.values(features), critic.values(features))


def test_critic_head_starts_from_the_seed_and_leaves_the_global_rng_alone():
    encoder, options = tiny_encoder(), MarftOptions(critic_hidden=4)
    state = torch.random.get_rng_state()
    first, again, other = (MarftCritic(encoder, options, seed).head.state_dict() for seed in (3, 3, 4))
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not torch.equal(first["mlp.0.weight"], other["mlp.0.weight"])
