"""The Hydra config (verl's ppo_trainer + the project's keys) and its start-up validation:
defaults are the paper's settings, verl's parts convert to verl's dataclasses, and every bad or
contradictory setting stops with a message naming the key."""

import copy
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf
from transformers import AutoTokenizer
from verl.trainer.config import AlgoConfig, CheckpointConfig
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.config import FSDPActorConfig, FSDPOptimizerConfig, HFModelConfig, SamplingConfig

from verl_masopd.config import compose_config
from verl_masopd.config.run import build_workflow
from verl_masopd.config.validate import validate_config, verl_algo_config
from verl_masopd.options.errors import ConfigError
from verl_masopd.rollout.backend import SamplingParams


def math_row(uid: str) -> dict:
    return {
        "data_source": "toy",
        "prompt": [{"role": "user", "content": f"What is {uid} + 1?"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "2"},
        "extra_info": {"index": 0, "id": uid, "split": "train", "problem": f"What is {uid} + 1?"},
    }


@pytest.fixture(scope="module")
def train_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "train.parquet"
    pq.write_table(pa.Table.from_pylist([math_row(str(i)) for i in range(4)]), path)
    return str(path)


@pytest.fixture(scope="module")
def paper_cfg():
    """The defaults, with nothing but the mandatory paths set (they are not checked here)."""
    return compose_config(["students.path=/models/student", "data.train_files=[/data/train.parquet]"])


@pytest.fixture(scope="module")
def cpu_cfg(tiny_model_path, tiny_teacher_path, train_file):
    """A valid CPU run: tiny student and teacher, the math workflow."""
    return compose_config(
        [
            "preset=cpu",
            "workflow.domain=math",
            f"students.path={tiny_model_path}",
            f"teacher.model_path={tiny_teacher_path}",
            f"data.train_files=[{train_file}]",
        ]
    )


def with_values(cfg, **dotted):
    """A copy of `cfg` with dotted keys (underscored `__` for `.`) set, new keys added."""
    cfg = copy.deepcopy(cfg)
    for key, value in dotted.items():
        OmegaConf.update(cfg, key.replace("__", "."), value, force_add=True, merge=False)
    return cfg


def error_of(cfg) -> str:
    with pytest.raises(ConfigError) as info:
        validate_config(cfg)
    return str(info.value)


def test_defaults_are_the_papers_common_settings(paper_cfg):
    c = paper_cfg
    assert (c.workflow.name, c.workflow.domain, c.workflow.agents_per_role, c.workflow.horizon) == ("mas", "code", 1, 4)
    assert c.workflow.policy_sharing == "role"
    assert (c.workflow.exec_timeout_s.code, c.workflow.exec_timeout_s.math) == (30.0, 20.0)
    assert (c.rollout.group_size, c.actor_rollout_ref.rollout.n, c.rollout.tree_sampling) == (4, 4, False)
    assert (c.data.max_prompt_length, c.data.max_response_length, c.data.train_batch_size) == (8192, 4096, 128)
    assert c.trainer.total_training_steps == 150
    actor = c.actor_rollout_ref.actor
    assert (actor.ppo_mini_batch_size, actor.optim.lr, actor.optim.weight_decay, actor.grad_clip) == (
        64,
        1e-6,
        0.01,
        1.0,
    )
    rollout = c.actor_rollout_ref.rollout
    assert (rollout.temperature, rollout.top_p, rollout.top_k) == (1.0, 1.0, -1)
    assert (rollout.val_kwargs.temperature, rollout.val_kwargs.top_p, rollout.val_kwargs.top_k) == (0.6, 0.95, 20)
    assert c.algorithm.adv_estimator == "masopd"
    assert dict(c.algorithm.masopd) == {"ras_coef": 0.25, "ras_clip": 5.0, "num_contrast_roles": 1}
    assert (c.pac.enable, c.pac.attribution, c.pac.reveal_reference) == (True, "rules", False)
    assert dict(c.algorithm.reward) == {"team_weight": 1.0, "local_weight": 1.0}
    assert (c.algorithm.marft.critic_lr, c.algorithm.marft.critic_hidden, c.algorithm.grpo.group_by) == (
        1e-5,
        64,
        "problem_role_turn",
    )
    assert c.actor_rollout_ref.model.path == "/models/student"


def test_cpu_preset_has_tiny_sizes(cpu_cfg):
    assert cpu_cfg.trainer.device == "cpu"
    assert (cpu_cfg.data.max_prompt_length, cpu_cfg.data.max_response_length, cpu_cfg.data.train_batch_size) == (
        2048,
        64,
        2,
    )
    assert (cpu_cfg.workflow.horizon, cpu_cfg.rollout.group_size, cpu_cfg.trainer.total_training_steps) == (2, 2, 2)


def test_small_cpu_preset_keeps_the_papers_prompts_with_lengths_for_a_small_real_model(tiny_model_path, train_file):
    cfg = compose_config(
        [
            "preset=small_cpu",
            "algorithm.adv_estimator=grpo",
            "workflow.domain=math",
            f"students.path={tiny_model_path}",
            f"data.train_files=[{train_file}]",
        ]
    )
    assert (cfg.trainer.device, cfg.workflow.prompt_style) == ("cpu", "paper")
    assert (cfg.data.max_prompt_length, cfg.data.max_response_length, cfg.data.train_batch_size) == (1024, 256, 4)
    assert cfg.actor_rollout_ref.actor.optim.lr == 5e-6
    assert cfg.teacher.max_context_length == 2048
    assert cfg.engines.max_tokens_per_micro_batch == 2048
    tiny = compose_config(["preset=tiny_world"])
    assert (tiny.workflow.prompt_style, tiny.data.max_response_length, tiny.actor_rollout_ref.actor.optim.lr) == (
        "compact",
        48,
        3e-4,
    )
    run = validate_config(cfg)
    assert run.workflow.prompt_style == "paper" and run.engines.max_tokens_per_micro_batch == 2048
    message = error_of(with_values(cfg, engines__max_tokens_per_micro_batch=1000))
    assert message == (
        "engines.max_tokens_per_micro_batch: 1000 tokens cannot hold one sequence of data.max_prompt_length + "
        "data.max_response_length = 1280 tokens"
    )


def test_verl_sections_convert_to_verls_dataclasses(cpu_cfg, tiny_model_path):
    actor = omega_conf_to_dataclass(cpu_cfg.actor_rollout_ref.actor)
    assert isinstance(actor, FSDPActorConfig)
    assert isinstance(actor.optim, FSDPOptimizerConfig) and actor.optim.lr == 1e-6
    assert isinstance(actor.checkpoint, CheckpointConfig) and "optimizer" in actor.checkpoint.save_contents
    val = omega_conf_to_dataclass(cpu_cfg.actor_rollout_ref.rollout.val_kwargs)
    assert isinstance(val, SamplingConfig) and (val.temperature, val.top_k) == (0.6, 20)
    model = omega_conf_to_dataclass(cpu_cfg.actor_rollout_ref.model)
    assert isinstance(model, HFModelConfig) and model.local_path == tiny_model_path


def test_algorithm_converts_to_verls_algo_config_only_without_the_project_sections(cpu_cfg):
    with pytest.raises(Exception, match="masopd|reward|per_role"):
        omega_conf_to_dataclass(cpu_cfg.algorithm, AlgoConfig)
    algo = verl_algo_config(cpu_cfg)
    assert isinstance(algo, AlgoConfig)
    assert (algo.adv_estimator, algo.norm_adv_by_std_in_grpo, algo.use_kl_in_reward) == ("masopd", True, False)
    assert "algorithm.colour" in str(
        pytest.raises(ConfigError, verl_algo_config, with_values(cpu_cfg, algorithm__colour=1)).value
    )


@pytest.mark.parametrize(
    "estimator, loss_mode, agg, kl",
    [
        ("masopd", "vanilla", "token-mean", False),
        ("magrpo", "gpg", "seq-mean-token-sum", False),
        ("marft", "marft", "seq-mean-token-mean", False),
        ("cure", "vanilla", "token-mean", True),
    ],
)
def test_the_estimator_chooses_the_actor_loss(paper_cfg, estimator, loss_mode, agg, kl):
    actor = omega_conf_to_dataclass(with_values(paper_cfg, algorithm__adv_estimator=estimator).actor_rollout_ref.actor)
    assert (actor.policy_loss.loss_mode, actor.loss_agg_mode, actor.use_kl_loss) == (loss_mode, agg, kl)
    assert (actor.kl_loss_type, actor.kl_loss_coef) == ("low_var_kl", 0.01)


def test_a_valid_config_reads_into_the_run_settings(cpu_cfg, tiny_model_path, tiny_teacher_path, train_file):
    run = validate_config(cpu_cfg)
    assert run.policies == ("reasoner", "tool_user")
    assert run.policy_path("reasoner") == tiny_model_path
    assert run.teacher.model_path == tiny_teacher_path
    assert run.estimator.name == "masopd" and run.estimator.spec.needs_teacher
    assert run.rollout.turn_barrier is True
    assert validate_config(with_values(cpu_cfg, rollout__turn_barrier=False)).rollout.turn_barrier is False
    assert "rollout.turn_barrier" in error_of(with_values(cpu_cfg, rollout__turn_barrier="sometimes"))
    assert run.rollout.max_off_policy == 0
    assert run.rollout_correction.rollout_is == "token" and run.rollout_correction.rollout_rs == "token_k1"
    on_vllm = with_values(cpu_cfg, actor_rollout_ref__rollout__name="vllm", rollout__max_off_policy=1)
    assert error_of(on_vllm) == (
        "rollout.max_off_policy: with full fine-tuning on vllm each policy generates and trains on one hybrid "
        "worker (its vLLM servers sleep through the policy's log-probs and update), so no rollout can play beside "
        "the update; use 0, LoRA policies (actor_rollout_ref.model.lora_rank > 0) or actor_rollout_ref.rollout.name=hf"
    )
    lora_on_vllm = with_values(on_vllm, actor_rollout_ref__model__lora_rank=4)
    assert validate_config(lora_on_vllm).rollout.max_off_policy == 1  # the multi-LoRA servers generate beside it
    assert validate_config(with_values(on_vllm, rollout__max_off_policy=0)).rollout.max_off_policy == 0
    beside = with_values(cpu_cfg, rollout__max_off_policy=1, actor_rollout_ref__rollout__temperature=0.6)
    assert validate_config(beside).train_sampling.log_prob_temperature == 0.6
    for truncation in ({"top_p": 0.9}, {"top_k": 20}):
        truncated = with_values(beside, **{f"actor_rollout_ref__rollout__{k}": v for k, v in truncation.items()})
        assert error_of(truncated).startswith(
            "rollout.max_off_policy: rollouts beside the update need untruncated sampling"
        )
        assert validate_config(with_values(truncated, rollout__max_off_policy=0)).rollout.max_off_policy == 0
    assert run.train_files == (train_file,) and run.val_files == ()
    assert run.train_sampling == SamplingParams(temperature=1.0, top_p=1.0, top_k=-1, max_new_tokens=64)
    assert run.val_sampling == SamplingParams(temperature=0.6, top_p=0.95, top_k=20, max_new_tokens=64)
    workflow = build_workflow(run.workflow)
    assert (workflow.horizon, workflow.timeout, [a.name for a in workflow.agents]) == (
        2,
        10.0,
        ["reasoner_0", "tool_user_0"],
    )


def test_per_agent_policies_and_their_own_starting_points(cpu_cfg, tiny_teacher_path):
    cfg = with_values(
        cpu_cfg,
        workflow__agents_per_role=2,
        workflow__policy_sharing="agent",
        students__policy_paths={"tool_user_1": tiny_teacher_path},
    )
    run = validate_config(cfg)
    assert run.policies == ("reasoner_0", "reasoner_1", "tool_user_0", "tool_user_1")
    assert run.policy_path("tool_user_1") == tiny_teacher_path
    assert run.policy_path("tool_user_0") == run.students.path


def test_unknown_keys_on_the_command_line_are_refused_by_hydra(tiny_model_path):
    with pytest.raises(Exception, match="colour"):
        compose_config([f"students.path={tiny_model_path}", "workflow.colour=red"])


@pytest.mark.parametrize(
    "key, value, named",
    [
        ("workflow.colour", "red", "workflow.colour: unknown key"),
        ("workflow.exec_timeout_s.java", 5.0, "workflow.exec_timeout_s.java: unknown key"),
        ("pac.verbose", True, "pac.verbose: unknown key"),
        ("teacher.temperature", 0.5, "teacher.temperature: unknown key"),
        ("students.adapter", 8, "students.adapter: unknown key"),
        ("algorithm.masopd.ras_scale", 2.0, "algorithm.masopd.ras_scale"),
        ("algorithm.marft.gama", 0.9, "algorithm.marft.gama"),
        ("algorithm.colour", 1, "algorithm.colour: unknown key"),
        ("workflow.horizon", 0, "workflow.horizon: must be >= 1"),
        ("workflow.horizon", "four", "workflow.horizon: Value 'four' of type 'str' could not be converted to Integer"),
        ("workflow.agents_per_role", 0, "workflow.agents_per_role"),
        ("workflow.policy_sharing", "team", "workflow.policy_sharing"),
        ("workflow.context_layout", "middle", "workflow.context_layout"),
        ("workflow.name", "trio", "workflow.name"),
        ("workflow.options", {"colour": 1}, "workflow.options: workflow 'mas' (math): unknown option(s) ['colour']"),
        ("workflow.options", {"timeout": 1.0}, "workflow.options.timeout: use workflow.exec_timeout_s"),
        ("pac.attribution", "oracle", "pac.attribution"),
        ("rollout.group_size", 0, "rollout.group_size"),
        ("rollout.max_off_policy", -1, "rollout.max_off_policy: must be >= 0"),
        ("teacher.max_context_length", 1, "teacher.max_context_length"),
        ("teacher.backend", "sglang", "teacher.backend: must be one of ('engine', 'vllm', 'lora_base'), got 'sglang'"),
        ("algorithm.adv_estimator", "ppo2", "algorithm.adv_estimator"),
        ("algorithm.masopd.ras_clip", -1.0, "algorithm.masopd.ras_clip"),
        ("trainer.logger", ["console", "neptune"], "trainer.logger"),
    ],
)
def test_bad_values_and_unknown_keys_are_named(cpu_cfg, key, value, named):
    assert named in error_of(with_values(cpu_cfg, **{key.replace(".", "__"): value}))


@pytest.mark.parametrize(
    ("device", "backend", "asked", "shares"),
    [
        ("cpu", "engine", None, True),
        ("cuda", "engine", None, False),
        ("cpu", "vllm", None, False),
        ("cpu", "engine", False, False),
        ("cuda", "engine", True, True),
    ],
)
def test_shared_prefix_scoring_is_on_for_the_engine_teacher_on_cpu_unless_set(cpu_cfg, device, backend, asked, shares):
    cfg = with_values(cpu_cfg, trainer__device=device, teacher__backend=backend, teacher__share_prefix=asked)
    assert validate_config(cfg).teacher.share_prefix is shares


def test_shared_prefix_scoring_on_the_vllm_teacher_is_refused(cpu_cfg):
    message = error_of(with_values(cpu_cfg, teacher__backend="vllm", teacher__share_prefix=True))
    assert message.startswith("teacher.share_prefix:") and "prefix cache" in message


def test_cure_on_math_is_refused(cpu_cfg):
    message = error_of(with_values(cpu_cfg, algorithm__adv_estimator="cure", workflow__policy_sharing="shared"))
    assert "workflow.domain" in message and "cure" in message


def test_masopd_and_opd_need_a_teacher(cpu_cfg):
    for estimator in ("masopd", "opd"):
        message = error_of(with_values(cpu_cfg, algorithm__adv_estimator=estimator, teacher__model_path=None))
        assert "teacher.model_path" in message and estimator in message


def test_at_grpo_needs_tree_sampling_with_branches(cpu_cfg):
    assert "rollout.tree_sampling" in error_of(with_values(cpu_cfg, algorithm__adv_estimator="at_grpo"))
    one_branch = with_values(
        cpu_cfg, algorithm__adv_estimator="at_grpo", rollout__tree_sampling=True, rollout__group_size=1
    )
    assert "rollout.group_size: tree sampling needs at least 2 branches" in error_of(one_branch)
    assert (
        validate_config(
            with_values(cpu_cfg, algorithm__adv_estimator="at_grpo", rollout__tree_sampling=True)
        ).rollout.group_size
        == 2
    )


def test_an_explicit_loss_that_contradicts_the_estimator_is_refused(cpu_cfg):
    message = error_of(with_values(cpu_cfg, actor_rollout_ref__actor__policy_loss__loss_mode="gpg"))
    assert "actor_rollout_ref.actor.policy_loss.loss_mode" in message


def test_one_shared_policy_with_per_role_paths_is_refused(cpu_cfg, tiny_model_path):
    cfg = with_values(cpu_cfg, workflow__policy_sharing="shared", students__policy_paths={"reasoner": tiny_model_path})
    message = error_of(cfg)
    assert "students.policy_paths" in message and "workflow.policy_sharing=shared" in message


def test_paths_for_policies_the_run_does_not_have_are_refused(cpu_cfg, tiny_model_path):
    message = error_of(with_values(cpu_cfg, students__policy_paths={"coder": tiny_model_path}))
    assert "students.policy_paths: ['coder'] are not policies of this run (['reasoner', 'tool_user'])" in message


def test_single_agent_workflow_has_one_agent(cpu_cfg):
    single = with_values(cpu_cfg, workflow__name="sa", algorithm__adv_estimator="grpo")
    assert validate_config(single).policies == ("reasoner",)
    assert "workflow.agents_per_role" in error_of(with_values(single, workflow__agents_per_role=2))


def test_missing_model_folders_are_named(cpu_cfg, tmp_path):
    assert "students.path" in error_of(with_values(cpu_cfg, students__path=str(tmp_path / "nowhere")))
    assert "teacher.model_path" in error_of(with_values(cpu_cfg, teacher__model_path=str(tmp_path)))
    mandatory = with_values(cpu_cfg, students__path="???")
    assert "students.path: a value is required" in error_of(mandatory)


def test_a_teacher_with_another_tokenizer_is_refused(cpu_cfg, tiny_model_path, tmp_path):
    other = tmp_path / "other_teacher"
    shutil.copytree(tiny_model_path, other)
    tokenizer = AutoTokenizer.from_pretrained(other)
    tokenizer.add_tokens(["<extra_token>"])
    tokenizer.save_pretrained(other)
    message = error_of(with_values(cpu_cfg, teacher__model_path=str(other)))
    assert message.startswith("students.path") and "differs from the teacher's" in message


def test_a_student_without_a_chat_template_is_refused(cpu_cfg, tiny_model_path, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(tiny_model_path, bare)
    (bare / "chat_template.jinja").unlink()
    message = error_of(with_values(cpu_cfg, students__path=str(bare)))
    assert message == f"students.path: the tokenizer at {bare} has no chat template; " + (
        "contexts are rendered with the model's chat template"
    )


def test_missing_data_files_are_named(cpu_cfg, tmp_path, train_file):
    missing = str(tmp_path / "absent.parquet")
    assert "data.train_files" in error_of(with_values(cpu_cfg, data__train_files=[train_file, missing]))
    assert missing in error_of(with_values(cpu_cfg, data__val_files=missing))
    assert "data.train_files" in error_of(with_values(cpu_cfg, data__train_files=[]))


def test_the_prompt_style_is_validated(cpu_cfg):
    assert "workflow.prompt_style: must be one of ('paper', 'compact'), got 'terse'" in error_of(
        with_values(cpu_cfg, workflow__prompt_style="terse")
    )
    assert "workflow.options.prompt_style: use workflow.prompt_style" in error_of(
        with_values(cpu_cfg, workflow__options={"prompt_style": "compact"})
    )


def test_each_policy_gets_its_adapter_and_vllm_takes_lora_on_every_policy_or_none(cpu_cfg, tiny_teacher_path):
    cfg = with_values(
        cpu_cfg,
        workflow__agents_per_role=2,
        workflow__policy_sharing="agent",
        students__policy_paths={"tool_user_1": tiny_teacher_path},
        actor_rollout_ref__model__lora_rank=8,
        students__lora={"reasoner_0": {"lora_rank": 16}},
    )
    loras = validate_config(cfg).loras
    assert {name: lora.rank for name, lora in loras.items()} == {
        "reasoner_0": 16,
        "reasoner_1": 8,
        "tool_user_0": 8,
        "tool_user_1": 8,
    }
    on_vllm = with_values(cfg, actor_rollout_ref__rollout__name="vllm")
    assert validate_config(on_vllm).loras == loras
    mixed = with_values(on_vllm, actor_rollout_ref__model__lora_rank=0)
    assert error_of(mixed) == (
        "students.lora: with actor_rollout_ref.rollout.name=vllm every policy trains LoRA or none does; "
        "reasoner_0 with LoRA, reasoner_1, tool_user_0, tool_user_1 without"
    )
    assert validate_config(with_values(mixed, actor_rollout_ref__rollout__name="hf")).loras["reasoner_1"] is None
    too_wide = with_values(on_vllm, students__lora={"reasoner_0": {"lora_rank": 1024}})
    assert error_of(too_wide) == (
        "actor_rollout_ref.model.lora_rank: reasoner_0's rank 1024 exceeds vLLM's largest max_lora_rank 512"
    )
    assert validate_config(cpu_cfg).loras == {"reasoner": None, "tool_user": None}


def test_the_lora_base_teacher_needs_a_lora_policy_on_the_teachers_folder(cpu_cfg, tiny_model_path, tiny_teacher_path):
    on_base = with_values(
        cpu_cfg,
        teacher__backend="lora_base",
        teacher__model_path=tiny_model_path,
        students__policy_paths={"reasoner": tiny_teacher_path},
        actor_rollout_ref__model__lora_rank=8,
    )
    run = validate_config(on_base)
    assert run.teacher_policy() == "tool_user" and run.teacher.share_prefix is True
    assert validate_config(cpu_cfg).teacher_policy() is None
    without_lora = error_of(with_values(on_base, actor_rollout_ref__model__lora_rank=0))
    assert without_lora.startswith("teacher.backend: lora_base scores with a LoRA policy's base model")
    assert without_lora.endswith("the LoRA policies start from nothing: LoRA is off")
    other_base = error_of(
        with_values(on_base, students__policy_paths={"reasoner": tiny_teacher_path, "tool_user": tiny_teacher_path})
    )
    assert f"teacher.model_path={tiny_model_path}" in other_base and tiny_teacher_path in other_base


def test_several_teachers_are_read_in_verls_names(cpu_cfg, tiny_model_path, tiny_teacher_path):
    models = {
        "strong": {"model_path": tiny_teacher_path, "key": None},
        "weak": {"model_path": tiny_model_path, "weight": 0.5},
    }
    run = validate_config(with_values(cpu_cfg, teacher__model_path=None, distillation__teacher_models=models))
    assert [(t.name, t.weight) for t in run.teachers.entries] == [("strong", 1.0), ("weak", 0.5)]
    assert run.teacher.model_path == run.teachers.entries[0].model_path  # null: the first teacher
    assert "teacher.model_path" in error_of(with_values(cpu_cfg, distillation__teacher_models={"weak": models["weak"]}))
    bad_weight = with_values(cpu_cfg, distillation__teacher_models={"weak": {**models["weak"], "weight": 0}})
    assert error_of(bad_weight).startswith("distillation.teacher_models.weak.weight: must be a finite number > 0")


def test_a_second_teacher_with_another_tokenizer_is_refused_by_its_key(
    cpu_cfg, tiny_model_path, tiny_teacher_path, tmp_path
):
    other = tmp_path / "other_teacher"
    shutil.copytree(tiny_model_path, other)
    tokenizer = AutoTokenizer.from_pretrained(other)
    tokenizer.add_tokens(["<extra_token>"])
    tokenizer.save_pretrained(other)
    models = {"strong": {"model_path": tiny_teacher_path}, "other": {"model_path": str(other)}}
    message = error_of(with_values(cpu_cfg, distillation__teacher_models=models))
    assert (
        message.startswith("distillation.teacher_models.other.model_path") and "differs from the teacher's" in message
    )


def test_a_frozen_or_live_teacher_needs_no_teacher_model(cpu_cfg, tiny_model_path, tiny_teacher_path):
    for source in ("frozen", "live"):
        for estimator in ("masopd", "opd"):
            cfg = with_values(
                cpu_cfg, teacher__source=source, teacher__model_path=None, algorithm__adv_estimator=estimator
            )
            run = validate_config(cfg)
            assert run.self_teacher and run.teacher.model_path is None and run.teacher.privileged is None
        grpo_opd = with_values(
            cpu_cfg,
            teacher__source=source,
            teacher__model_path=None,
            algorithm__adv_estimator="grpo",
            distillation__distillation_loss__use_task_rewards=True,
        )
        assert validate_config(grpo_opd).teacher.source == source
    path = validate_config(with_values(cpu_cfg, teacher__privileged="reference"))
    assert not path.self_teacher and path.teacher.privileged == "reference"
    no_model = error_of(with_values(cpu_cfg, teacher__model_path=None))
    assert no_model == "teacher.model_path is required by algorithm.adv_estimator=masopd"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"teacher__source": "copy"}, "teacher.source: must be one of ('path', 'frozen', 'live'), got 'copy'"),
        ({"teacher__privileged": "solution"}, "teacher.privileged: must be null or reference, got 'solution'"),
        ({"teacher__source": "live"}, "teacher.model_path: must be null with teacher.source=live"),
        (
            {"teacher__source": "frozen", "teacher__model_path": None, "teacher__backend": "lora_base"},
            "teacher.backend: lora_base names a model by teacher.model_path; with teacher.source=frozen",
        ),
        (
            {"teacher__source": "live", "teacher__model_path": None, "teacher__backend": "vllm"},
            "teacher.backend: vllm serves a fixed model; teacher.source=live scores with each policy's own engine",
        ),
        (
            {"teacher__source": "frozen", "distillation__teacher_models": {"t": {"model_path": "/x"}}},
            "distillation.teacher_models: the teachers are each policy itself with teacher.source=frozen",
        ),
    ],
)
def test_bad_teacher_sources_are_named(cpu_cfg, values, message):
    assert error_of(with_values(cpu_cfg, **values)).startswith(message)


def test_a_frozen_teacher_refuses_lora_policies_that_start_from_an_adapter(cpu_cfg, tiny_model_path, tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(f'{{"base_model_name_or_path": "{tiny_model_path}", "r": 4}}')
    cfg = with_values(
        cpu_cfg,
        teacher__source="frozen",
        teacher__model_path=None,
        actor_rollout_ref__model__lora_rank=4,
        students__lora={"tool_user": {"lora_adapter_path": str(adapter)}},
    )
    assert error_of(cfg).startswith(
        "actor_rollout_ref.model.lora_adapter_path: teacher.source=frozen scores a LoRA policy with its adapter off"
    )
    assert "but tool_user start from a saved adapter" in error_of(cfg)
    assert validate_config(with_values(cfg, teacher__source="live")).loras["tool_user"].adapter_path == str(adapter)
    assert validate_config(with_values(cfg, students__lora={})).loras["tool_user"].rank == 4


def test_a_live_teacher_with_a_topk_mode_on_hybrid_workers_is_refused_before_anything_starts(cpu_cfg):
    """The hybrid vLLM workers of full fine-tuning have no packed forward for a live teacher's top-k
    rows: refused by the validation, before any engine or server starts; hf runs it."""
    live_topk = with_values(
        cpu_cfg,
        teacher__source="live",
        teacher__model_path=None,
        distillation__distillation_loss__loss_mode="forward_kl_topk",
        distillation__distillation_loss__topk=4,
        distillation__distillation_loss__use_policy_gradient=False,
    )
    assert validate_config(live_topk).estimator.distillation.uses_topk
    assert error_of(with_values(live_topk, actor_rollout_ref__rollout__name="vllm")).startswith(
        "teacher.source: live with a top-k distillation mode needs the policy engine's packed forward"
    )
