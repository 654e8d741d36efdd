"""Each policy's LoRA settings from verl's model keys and `students.lora.<policy>`, and the start-up
refusals, on a real tiny model (verl_masopd/config/lora.py)."""

import json

import pytest
from omegaconf import OmegaConf

from verl_masopd.config.lora import policy_loras
from verl_masopd.engine.policy_engine import EngineSettings, Lora, training_worker_config
from verl_masopd.options.errors import ConfigError
from verl_masopd.tiny_world.models import cached_model


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return cached_model(tmp_path_factory.mktemp("tiny"))


def config(own=None, **shared):
    keys = {"lora_rank": 0, "lora_alpha": 16, "target_modules": "all-linear", "exclude_modules": None}
    cfg = {"actor_rollout_ref": {"model": keys | {"lora_adapter_path": None} | shared}}
    return OmegaConf.create(cfg | ({"students": {"lora": own}} if own is not None else {}))


def test_rank_zero_is_full_fine_tuning(model):
    assert policy_loras(config(), {"coder": model, "tester": model}) == {"coder": None, "tester": None}


def test_shared_keys_with_a_policys_own_rank(model):
    cfg = config({"coder": {"lora_rank": 32, "target_modules": ["q_proj", "v_proj"]}}, lora_rank=8, lora_alpha=4)
    loras = policy_loras(cfg, {"coder": model, "tester": model})
    assert loras == {
        "coder": Lora(rank=32, alpha=4, target_modules=("q_proj", "v_proj")),
        "tester": Lora(rank=8, alpha=4),
    }
    fields = training_worker_config(EngineSettings(model_path=model, lora=loras["coder"])).model_config
    assert (fields.lora_rank, fields.lora_alpha, list(fields.target_modules)) == (32, 4, ["q_proj", "v_proj"])


def test_a_policy_of_its_own_can_turn_lora_on_alone(model):
    assert policy_loras(config({"tester": {"lora_rank": 2}}), {"coder": model, "tester": model}) == {
        "coder": None,
        "tester": Lora(rank=2),
    }


def adapter(tmp_path, base):
    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base, "r": 8}))
    return str(folder)


@pytest.mark.parametrize(
    "make, named",
    [
        (lambda m, t: config(lora_rank=-1), "actor_rollout_ref.model.lora_rank: must be an integer >= 0"),
        (lambda m, t: config({"coder": {"lora_rank": 0}}), "students.lora.coder.lora_rank: must be an integer >= 1"),
        (lambda m, t: config({"coach": {"lora_rank": 4}}), "students.lora: ['coach'] are not policies of this run"),
        (lambda m, t: config({"coder": {"rank": 4}}), "students.lora.coder.rank: unknown key"),
        (
            lambda m, t: config(lora_rank=8, target_modules=["qkv_proj"]),
            "actor_rollout_ref.model.target_modules: Target modules {'qkv_proj'} not found",
        ),
        (
            lambda m, t: config(lora_rank=8, target_modules=["q_proj"], exclude_modules=["q_proj"]),
            "actor_rollout_ref.model.exclude_modules: No modules were targeted",
        ),
        (
            lambda m, t: config(lora_rank=8, lora_adapter_path=str(t)),
            "actor_rollout_ref.model.lora_adapter_path: no PEFT adapter at",
        ),
        (
            lambda m, t: config({"coder": {"lora_rank": 8, "lora_adapter_path": adapter(t, "/models/other")}}),
            "students.lora.coder.lora_adapter_path: the adapter at",
        ),
    ],
)
def test_bad_settings_stop_the_start_naming_the_key(model, tmp_path, make, named):
    with pytest.raises(ConfigError) as info:
        policy_loras(make(model, tmp_path), {"coder": model})
    assert str(info.value).startswith(named) and "\n" not in str(info.value)


def test_an_adapter_of_the_policys_own_base_is_accepted(model, tmp_path):
    path = adapter(tmp_path, model)
    assert policy_loras(config(lora_rank=8, lora_adapter_path=path), {"coder": model})["coder"].adapter_path == path
