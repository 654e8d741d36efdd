"""One model on verl's real training engine (`TrainingWorker` + FSDP2), in-process or on Ray.

A trainer owns one `PolicyEngine` per policy and one for the teacher (`forward_only=True`).
Batches are verl `DataProto`s in the per-policy layout (prompts, responses, input_ids,
attention_mask, position_ids, response_mask, and for updates advantages plus old_log_probs or
rollout_log_probs); every tensor is left/right padded and results come back aligned to the
response tokens, [B, R].

    engine = PolicyEngine.local(EngineSettings(model_path=path, lr=1e-5))
    log_probs = engine.infer_batch(batch)                        # log pi(y_t | x, y_<t), 0 on padding
    log_probs, entropy = engine.log_probs_and_entropy(batch)     # and H_t of pi(. | x, y_<t)
    metrics = engine.train_mini_batch(batch, policy_loss("vanilla"))
    weights = engine.hf_state_dict()                             # HF names, for a generation backend

On CPU the process must run with VERL_PLATFORM=cpu (verl_masopd.platform); `local` needs no Ray,
`on_ray` places the worker(s) in a `RayResourcePool`, which several engines may share.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from torch.distributed.tensor import DTensor
from transformers import AutoModelForCausalLM, AutoTokenizer
from verl import DataProto
from verl.single_controller.base.decorator import Dispatch, register
from verl.trainer.config import CheckpointConfig
from verl.utils import tensordict_utils as tu
from verl.utils.fsdp_utils import merged_lora_context, normalize_peft_param_name
from verl.utils.model import convert_weight_keys
from verl.workers.config import FSDPActorConfig, FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig, PolicyLossConfig
from verl.workers.config.engine import TrainingWorkerConfig
from verl.workers.engine_workers import TrainingWorker
from verl.workers.utils.losses import ppo_loss
from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

from verl_masopd.platform.packed_attention import PACKED_SDPA, packed_attention_implementation
from verl_masopd.teacher.prefix_scoring import score_with_shared_prefix

# torch.distributed's rendezvous variables; `PolicyEngine.local` sets them in this process's
# environment, so a child process that starts engines of its own must not inherit them.
RENDEZVOUS_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
MODEL_INPUT_KEYS = ("prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask")
DTYPES = {"float32": "fp32", "bfloat16": "bf16"}
# A checkpoint holds the model shards, optimizer and scheduler state and an HF copy of the weights;
# resuming loads all but the HF copy. With LoRA the HF copy is the merged model, written by
# `PolicyEngine.save_checkpoint` (verl's would hold the adapter-wrapped names), next to the adapter.
CHECKPOINT_SAVE = ("model", "optimizer", "extra", "hf_model")
CHECKPOINT_LOAD = ("model", "optimizer", "extra")
ADAPTER_FOLDER = "adapter"
# The config key the engine's attention choice (a runtime setting, `training_worker_config`) takes in
# the model config that verl's checkpoint manager saves.
ATTENTION_KEY = "attn_implementation"


def check_model_path(path: str | os.PathLike) -> str:
    """`path` as a string if it is a folder with a config.json, else an error naming it."""
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"model path {str(path)!r} does not exist or is not a folder")
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"model path {str(path)!r} has no config.json (not a transformers model folder)")
    return str(folder)


def restore_source_attention(exported: Path, source: str | os.PathLike) -> None:
    """Give the exported config.json `exported` the source model's `attn_implementation`, or none
    when the source has none or names this project's sdpa_packed.

    The engine's attention is a runtime setting that verl's checkpoint manager writes into the saved
    model config; "sdpa_packed" there stops `from_pretrained` in any program that has not imported
    this project. Engines set it again when they load (`training_worker_config`). A worker that
    exported no config.json is left as it is.
    """
    if not exported.is_file():
        return
    config = json.loads(exported.read_text())
    original = json.loads((Path(source) / "config.json").read_text()).get(ATTENTION_KEY)
    if original in (None, PACKED_SDPA):
        config.pop(ATTENTION_KEY, None)
    else:
        config[ATTENTION_KEY] = original
    exported.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


@dataclass(frozen=True)
class Lora:
    """verl's LoRA keys (`actor_rollout_ref.model.lora_*`): W x + (α / r) · B A x on the
    `target_modules` (less `exclude_modules`), A, B the only trained weights; `adapter_path` starts
    from a PEFT adapter instead of B = 0. `hf_state_dict` exports the merged weights W + (α / r) · B A."""

    rank: int
    alpha: int = 16
    target_modules: tuple[str, ...] | str = "all-linear"
    exclude_modules: tuple[str, ...] | None = None
    adapter_path: str | None = None

    def model_fields(self) -> dict:
        """The fields of verl's `HFModelConfig` for this adapter."""
        targets = self.target_modules if isinstance(self.target_modules, str) else list(self.target_modules)
        return {
            "lora_rank": self.rank,
            "lora_alpha": self.alpha,
            "target_modules": targets,
            "exclude_modules": None if self.exclude_modules is None else list(self.exclude_modules),
            "lora_adapter_path": self.adapter_path,
        }


@dataclass(frozen=True)
class EngineSettings:
    """What a `PolicyEngine` is built from.

    dtype: the dtype parameters are computed in ("float32" or "bfloat16"); master weights and
    optimizer state stay float32. max_tokens_per_micro_batch bounds the packed tokens of one
    forward pass (verl's dynamic batch size). world_size: ranks on Ray (local mode uses 1).
    lora: verl's LoRA keys of the model config (`Lora`); None trains every weight.
    """

    model_path: str
    forward_only: bool = False
    lr: float = 1e-6
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    dtype: str = "float32"
    max_tokens_per_micro_batch: int = 16384
    gradient_checkpointing: bool = False
    seed: int = 0
    world_size: int = 1
    lora: Lora | None = None

    def __post_init__(self):
        check_model_path(self.model_path)
        if self.dtype not in DTYPES:
            raise ValueError(f"EngineSettings.dtype={self.dtype!r}; choose one of {sorted(DTYPES)}")
        if self.world_size < 1:
            raise ValueError(f"EngineSettings.world_size={self.world_size} must be at least 1")


def precision_fields(settings: EngineSettings) -> dict:
    """The FSDP engine's precision fields for `settings`: float32 master weights, compute in `dtype`.

    A forward-only engine (a teacher, a reference) has no optimizer and so no master weights: in
    bfloat16 it loads its weights in bfloat16 (as verl's own forward-only default does), half the
    memory, and computes what the float32 copy cast to bfloat16 for every forward would."""
    half = settings.forward_only and settings.dtype == "bfloat16"
    return {
        "dtype": settings.dtype,
        "model_dtype": "bf16" if half else "fp32",
        "mixed_precision": {"param_dtype": DTYPES[settings.dtype], "reduce_dtype": "fp32", "buffer_dtype": "fp32"},
    }


def training_worker_config(settings: EngineSettings) -> TrainingWorkerConfig:
    """verl's `TrainingWorkerConfig` for `settings`: FSDP2, padding-free packed sequences, attention that
    costs Σ|s_i|² per packed row (`platform.packed_attention`)."""
    model = HFModelConfig(
        path=settings.model_path,
        enable_gradient_checkpointing=settings.gradient_checkpointing,
        use_remove_padding=True,
        override_config={"attn_implementation": packed_attention_implementation()},
        **(settings.lora.model_fields() if settings.lora is not None else {}),
    )
    engine = FSDPEngineConfig(
        strategy="fsdp2",
        forward_only=settings.forward_only,
        **precision_fields(settings),
        use_dynamic_bsz=True,
        max_token_len_per_gpu=settings.max_tokens_per_micro_batch,
        infer_max_token_len_per_gpu=settings.max_tokens_per_micro_batch,
        use_torch_compile=False,
        seed=settings.seed,
    )
    optimizer = (
        None
        if settings.forward_only
        else FSDPOptimizerConfig(lr=settings.lr, weight_decay=settings.weight_decay, clip_grad=settings.grad_clip)
    )
    save = [part for part in CHECKPOINT_SAVE if settings.lora is None or part != "hf_model"]
    checkpoint = CheckpointConfig(save_contents=save, load_contents=list(CHECKPOINT_LOAD))
    return TrainingWorkerConfig(
        model_type="language_model",
        model_config=model,
        engine_config=engine,
        optimizer_config=optimizer,
        checkpoint_config=checkpoint,
    )


def policy_loss(
    loss_mode: str = "vanilla",
    *,
    clip_ratio: float = 0.2,
    clip_ratio_high: float | None = None,
    loss_agg_mode: str = "token-mean",
    entropy_coeff: float = 0.0,
    use_kl_loss: bool = False,
    kl_loss_coef: float = 0.001,
    kl_loss_type: str = "low_var_kl",
):
    """verl's `ppo_loss` with the policy loss registered as `loss_mode` (verl's or this project's).

    It reads old_log_probs and advantages from the batch, and ref_log_prob when `use_kl_loss`
    adds kl_loss_coef · KL(π_θ ‖ π_ref) (`kl_loss_type`, e.g. low_var_kl = k3); picklable, so
    Ray workers accept it.
    """
    config = FSDPActorConfig(
        strategy="fsdp2",
        rollout_n=1,
        use_dynamic_bsz=True,
        clip_ratio=clip_ratio,
        clip_ratio_low=clip_ratio,
        clip_ratio_high=clip_ratio if clip_ratio_high is None else clip_ratio_high,
        loss_agg_mode=loss_agg_mode,
        entropy_coeff=entropy_coeff,
        policy_loss=PolicyLossConfig(loss_mode=loss_mode),
        use_kl_loss=use_kl_loss,
        kl_loss_coef=kl_loss_coef,
        kl_loss_type=kl_loss_type,
    )
    return partial(ppo_loss, config=config)


def _full(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU copy of the whole tensor (gathered from its shards when it is a DTensor)."""
    return (tensor.full_tensor() if isinstance(tensor, DTensor) else tensor).detach().to("cpu", copy=True)


class EngineWorker(TrainingWorker):
    """verl's `TrainingWorker` plus the weight export a generation backend needs."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def reset(self):
        """verl's model build with torch's RNG seeded by the engine's seed for its duration, so
        that the weights drawn at build (LoRA's A) are the same in every run of the same config;
        the process's RNG state is left as it was."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.config.engine_config.seed)
            super().reset()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def hf_state_dict(self) -> dict[str, torch.Tensor] | None:
        """Full HF-named weights on rank 0 (None elsewhere); a collective, every rank iterates.
        With LoRA, the merged weights W + (α / r) · B A in the master weights' float32 (verl's
        merge, `merged_lora_context`, restoring the unmerged base after)."""
        if self.engine.model_config.lora_rank > 0:
            module = self.engine.module
            with merged_lora_context(module, backup_adapters=True):
                params = convert_weight_keys(normalize_peft_param_name(module.state_dict()), module)
                full = {name: _full(tensor) for name, tensor in params.items()}
        else:
            params, _ = self.engine.get_per_tensor_param()
            full = {name: _full(tensor) for name, tensor in params}
        return full if torch.distributed.get_rank() == 0 else None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_adapter(self, folder: str) -> None:
        """The LoRA adapter in PEFT's format (adapter_config.json, adapter_model.safetensors) on
        rank 0; a collective, every rank gathers the shards of the adapter weights (not the base's)."""
        module = self.engine.module
        state = {name: _full(tensor) for name, tensor in module.state_dict().items() if "lora_" in name}
        if torch.distributed.get_rank() == 0:
            module.save_pretrained(folder, state_dict=state)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def adapter_files(self) -> dict[str, bytes] | None:
        """The files `save_adapter` writes (file name → bytes) on rank 0, None elsewhere: the adapter
        travels to a server on any node without a shared file system; a collective."""
        with tempfile.TemporaryDirectory(prefix="adapter-") as folder:
            self.save_adapter(folder)
            if torch.distributed.get_rank() != 0:
                return None
            return {path.name: path.read_bytes() for path in Path(folder).iterdir() if path.is_file()}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def score_shared_prefix(
        self, requests: list, adapter: bool = True, topk: int = 0, share: bool = True
    ) -> tuple[list, int]:
        """Teacher log-probs of `requests` (ScoreRequests) computing each response's shared context
        prefix once (`teacher.prefix_scoring`; with `topk`, the top k too; share=False, no sharing),
        and the tokens computed; every rank runs it. With adapter=False, a LoRA model's adapter is
        off (verl's `disable_adapter`): the base model."""
        from verl.utils.device import get_device_name

        engine = self.engine
        with engine.eval_mode(), nullcontext() if adapter else engine.disable_adapter():
            return score_with_shared_prefix(
                engine.module,
                requests,
                get_device_name(),
                getattr(engine, "_autocast_dtype", torch.float32),
                topk=topk,
                share=share,
            )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _to_engine_input(batch: DataProto, extra_keys: tuple[str, ...], temperature: float):
    missing = [key for key in MODEL_INPUT_KEYS + extra_keys if key not in batch.batch.keys()]
    if missing:
        raise KeyError(f"batch lacks {missing}; it has {sorted(batch.batch.keys())}")
    data = DataProto(batch=batch.batch.select(*MODEL_INPUT_KEYS, *extra_keys), meta_info={})
    td = left_right_2_no_padding(data.to_tensordict())
    tu.assign_non_tensor(td, temperature=temperature)
    return td


class PolicyEngine:
    """One model on verl's engine; built by `local` (this process, one rank) or `on_ray`."""

    def __init__(self, settings: EngineSettings, worker, *, remote: bool):
        self.settings = settings
        self._worker = worker
        self._remote = remote
        self._loss_fn = None

    @classmethod
    def local(cls, settings: EngineSettings) -> PolicyEngine:
        """The engine in this process as rank 0 of a one-rank gloo/nccl group.

        Sets the torch.distributed rendezvous variables (RANK, WORLD_SIZE, MASTER_ADDR, ...) in
        this process's environment if absent; several local engines share the process group.
        """
        if settings.world_size != 1:
            raise ValueError(f"a local engine has one rank; EngineSettings.world_size={settings.world_size}")
        for key, value in zip(RENDEZVOUS_VARIABLES[:-1], ("0", "0", "1", "1", "127.0.0.1"), strict=True):
            os.environ.setdefault(key, value)
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
        worker = EngineWorker(config=training_worker_config(settings))
        worker.reset()
        return cls(settings, worker, remote=False)

    @classmethod
    def on_ray(cls, settings: EngineSettings, resource_pool=None, name_prefix: str | None = None) -> PolicyEngine:
        """The engine as a Ray worker group of `settings.world_size` ranks (Ray must be initialised).

        resource_pool: a verl `RayResourcePool` to place the workers in; several engines may share
        one, e.g. `RayResourcePool([1], use_gpu=False, max_colocate_count=2)` holds two one-rank
        engines on two CPUs. Default: a pool of its own with one CPU or GPU per rank.
        """
        import ray
        from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
        from verl.utils.device import get_device_name

        device = get_device_name()
        if resource_pool is None:
            resource_pool = RayResourcePool(
                process_on_nodes=[settings.world_size], use_gpu=device != "cpu", max_colocate_count=1
            )
        env = {key: os.environ[key] for key in ("VERL_PLATFORM", "RAY_AUTH_MODE") if key in os.environ}
        worker_cls = RayClassWithInitArgs(cls=ray.remote(EngineWorker), config=training_worker_config(settings))
        if env:
            worker_cls.update_options({"runtime_env": {"env_vars": env}})
        group = RayWorkerGroup(
            resource_pool=resource_pool, ray_cls_with_init=worker_cls, device_name=device, name_prefix=name_prefix
        )
        group.reset()
        return cls(settings, group, remote=True)

    def _call(self, method: str, *args, **kwargs):
        result = getattr(self._worker, method)(*args, **kwargs)
        if self._remote and hasattr(result, "get"):
            result = result.get()
        if self._remote and isinstance(result, list):
            result = result[0]
        return result

    def infer_batch(self, batch: DataProto, temperature: float = 1.0, adapter: bool = True) -> torch.Tensor:
        """log pi(y_t | context, y_<t) of every response token, from logits / temperature:
        [B, R] float32, 0 where response_mask is 0. adapter=False: with a LoRA model's adapter
        off (verl's `no_lora_adapter`), the log-probs of the base model."""
        return self._forward(batch, temperature, entropy=False, adapter=adapter)[0]

    def log_probs_and_entropy(self, batch: DataProto, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        """`infer_batch`'s log-probs and, from the same forward pass, the policy's entropy at every
        response position, H_t = −Σ_v pi(v | context, y_<t) log pi(v | context, y_<t) (verl's
        calculate_entropy, as verl's trainer computes it with the old log-probs): both [B, R]
        float32, 0 where response_mask is 0. The log-probs are those `infer_batch` returns."""
        return self._forward(batch, temperature, entropy=True)

    def _forward(
        self, batch: DataProto, temperature: float, entropy: bool, adapter: bool = True
    ) -> tuple[torch.Tensor, ...]:
        td = _to_engine_input(batch, (), temperature)
        tu.assign_non_tensor(td, calculate_entropy=entropy, compute_loss=False)
        if not adapter:
            tu.assign_non_tensor(td, no_lora_adapter=True)
        output = self._call("infer_batch", td)
        keys = ("log_probs", "entropy") if entropy else ("log_probs",)
        mask = batch.batch["response_mask"].float()
        return tuple(no_padding_2_padding(tu.get(output, key), td).float() * mask for key in keys)

    def train_mini_batch(
        self,
        batch: DataProto,
        loss_fn,
        *,
        mini_batch_size: int | None = None,
        epochs: int = 1,
        temperature: float = 1.0,
        shuffle: bool = False,
    ) -> dict:
        """One pass of `epochs` x (B / mini_batch_size) optimizer steps with `loss_fn` (see `policy_loss`).

        The batch carries advantages [B, R] and old_log_probs [B, R]; without old_log_probs the
        sampling log-probs (rollout_log_probs) stand in; ref_log_prob [B, R] (KL to a reference policy)
        and rollout_is_weights [B, R] (the rollout correction of stale rows, trainer/staleness.py)
        are passed on when present. Token entropies are computed when `loss_fn.needs_entropy`
        (config/actor_loss.py). A loss with `engine_tensors` (trainer/distillation_loss.py) adds
        its inputs to the batch, and one that `uses_topk` gets verl's top-k logits pass. Returns
        verl's metrics (loss, grad_norm, lr, the loss function's own). mini_batch_size defaults to
        the whole batch.
        """
        if self.settings.forward_only:
            raise RuntimeError(f"engine for {self.settings.model_path!r} is forward-only and cannot train")
        if "old_log_probs" not in batch.batch.keys() and "rollout_log_probs" in batch.batch.keys():
            batch = DataProto(batch=batch.batch.clone(), meta_info=dict(batch.meta_info))
            batch.batch["old_log_probs"] = batch.batch["rollout_log_probs"]
        optional = ("ref_log_prob", "rollout_is_weights")
        extra = ("old_log_probs", "advantages") + tuple(k for k in optional if k in batch.batch.keys())
        engine_tensors = loss_fn.engine_tensors(batch) if hasattr(loss_fn, "engine_tensors") else {}
        if engine_tensors:
            batch = DataProto(batch=batch.batch.copy(), meta_info=dict(batch.meta_info))
            batch.batch.update(engine_tensors)
            extra += tuple(engine_tensors)
        td = _to_engine_input(batch, extra, temperature)
        if getattr(loss_fn, "uses_topk", False):
            tu.assign_non_tensor(td, distillation_use_topk=True)
        size = mini_batch_size or len(batch)
        if len(batch) % size:
            raise ValueError(f"batch of {len(batch)} rows does not split into mini-batches of {size}")
        tu.assign_non_tensor(
            td,
            calculate_entropy=bool(getattr(loss_fn, "needs_entropy", False)),
            compute_loss=True,
            global_batch_size=size,
            mini_batch_size=size,
            epochs=epochs,
            seed=self.settings.seed,
            dataloader_kwargs={"shuffle": shuffle},
        )
        if loss_fn is not self._loss_fn:
            self._call("set_loss_fn", loss_fn)
            self._loss_fn = loss_fn
        output = self._call("train_mini_batch", td)
        return dict(tu.get(output, "metrics"))

    def score_shared_prefix(
        self, requests: list, adapter: bool = True, topk: int = 0, share: bool = True
    ) -> tuple[list, int]:
        """log π(y_i | x, y_<i) per `teacher.scoring.ScoreRequest`, each response's shared context prefix
        computed once (`teacher.prefix_scoring`; `TopKScores` with `topk` > 0; share=False: no
        sharing); and the number of tokens run through the model. adapter=False: the base model
        of a LoRA policy (its adapter off)."""
        return self._call("score_shared_prefix", list(requests), adapter=adapter, topk=topk, share=share)

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """The current weights under their HF names (full tensors on CPU), ready for `load_state_dict`."""
        return self._call("hf_state_dict")

    def adapter_files(self) -> dict[str, bytes]:
        """The LoRA adapter in PEFT's format, as file name → bytes (adapter_config.json,
        adapter_model.safetensors): what a multi-LoRA server loads after each update."""
        if self.settings.lora is None:
            raise RuntimeError(f"engine for {self.settings.model_path!r} trains every weight: it has no adapter")
        return self._call("adapter_files")

    def save_checkpoint(self, folder: str | os.PathLike, step: int) -> None:
        """Model shards (float32), optimizer and scheduler state, and a `huggingface/` folder that
        `from_pretrained` loads (verl writes it in bfloat16), under `folder`; its config.json
        carries the source model's attention setting, not the engine's (`restore_source_attention`).
        With LoRA, `huggingface/` is the merged model (float32) and `adapter/` the adapter in
        PEFT's format, which `PeftModel.from_pretrained(base, folder / "adapter")` loads."""
        self._call("save_checkpoint", str(folder), global_step=step)
        if self.settings.lora is not None:
            self._call("save_adapter", str(Path(folder) / ADAPTER_FOLDER))
            self._save_merged(Path(folder) / "huggingface")
        restore_source_attention(Path(folder) / "huggingface" / "config.json", self.settings.model_path)

    def _save_merged(self, folder: Path) -> None:
        """The merged weights W + (α / r) · B A as a Hugging Face model with the source's tokenizer."""
        model = AutoModelForCausalLM.from_pretrained(self.settings.model_path, dtype=torch.float32)
        model.load_state_dict(self.hf_state_dict())
        model.save_pretrained(folder)
        AutoTokenizer.from_pretrained(self.settings.model_path).save_pretrained(folder)

    def load_checkpoint(self, folder: str | os.PathLike) -> None:
        """Restore model, optimizer and scheduler state written by `save_checkpoint` to `folder`."""
        if not Path(folder).is_dir():
            raise FileNotFoundError(f"checkpoint folder {str(folder)!r} does not exist")
        self._call("load_checkpoint", str(folder), del_local_after_load=False)
