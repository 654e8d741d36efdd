"""The run config's record (`composed_record`, `RunConfig.composed`) is what a checkpoint saves, and
a checkpoint written before the trainer read its config into one form still evaluates and resumes.

data/run_before_one_config/global_step_3 holds the config.yaml and trainer_state.json that the
earlier trainer wrote for `OVERRIDES` (a math masopd run with two teachers and no
teacher.model_path, which the earlier validation filled in, in the composed config itself).
"""

import json
from pathlib import Path

from omegaconf import OmegaConf

from verl_masopd.config import compose_config
from verl_masopd.config.validate import composed_record
from verl_masopd.eval.run_config import run_settings
from verl_masopd.trainer.checkpoint import (
    CONFIG_FILE,
    STATE_FILE,
    TrainerState,
    changed_config_keys,
    config_hash,
    save_checkpoint,
)

EARLIER = Path(__file__).parent / "data" / "run_before_one_config" / "global_step_3"
OVERRIDES = [
    "preset=cpu",
    "workflow.domain=math",
    "algorithm.adv_estimator=masopd",
    "students.path=/models/student",
    "data.train_files=[/data/math.parquet]",
    "teacher.model_path=null",
    "+distillation.teacher_models={alpha: {model_path: /models/teacher_a}, "
    "beta: {model_path: /models/teacher_b, weight: 2.0}}",
    "trainer.default_local_dir=/runs/before",
]


def earlier_record() -> dict:
    return OmegaConf.to_container(OmegaConf.load(EARLIER / CONFIG_FILE))


def test_an_earlier_checkpoint_evaluates_with_the_system_it_was_trained_in():
    settings = run_settings(EARLIER)
    assert (settings["workflow"], settings["agents_per_role"], settings["horizon"]) == ("mas", 1, 2)
    assert (settings["policy_sharing"], settings["prompt_style"]) == ("role", "paper")
    assert settings["max_new_tokens"] == 64


def test_an_earlier_checkpoint_resumes_its_own_config_unchanged_and_saves_it_byte_for_byte(tmp_path):
    record = earlier_record()
    assert config_hash(record) == json.loads((EARLIER / STATE_FILE).read_text())["config_hash"]
    assert changed_config_keys(EARLIER, record) == []
    longer = {**record, "trainer": {**record["trainer"], "total_training_steps": 999}}
    assert changed_config_keys(EARLIER, longer) == []  # a resume may run longer
    seeded = {**record, "trainer": {**record["trainer"], "seed": 7}}
    assert changed_config_keys(EARLIER, seeded) == ["trainer.seed"]
    path = save_checkpoint(tmp_path, TrainerState(4, {}, config_hash(record)), record, {})
    assert (path / CONFIG_FILE).read_bytes() == (EARLIER / CONFIG_FILE).read_bytes()


def test_the_record_resolves_and_names_the_first_teacher_without_changing_the_composed_config():
    cfg = compose_config(OVERRIDES)
    record = composed_record(cfg)
    assert cfg.teacher.model_path is None, "the composed config itself is not written"
    assert record["teacher"]["model_path"] == "/models/teacher_a"
    assert record["actor_rollout_ref"]["actor"]["policy_loss"]["loss_mode"] == "vanilla"  # ${masopd_actor:...}
    for key in ("teacher", "distillation", "workflow", "data"):
        assert record[key] == earlier_record()[key]
