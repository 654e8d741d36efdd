"""Several teachers (teacher/teachers.py): fixed and confidence weights by hand and the start-up
refusals (their combined scores: test_teacher_scoring.py)."""

import math

import pytest
from omegaconf import OmegaConf

from verl_masopd.config.teachers import read_teachers
from verl_masopd.options.errors import ConfigError
from verl_masopd.teacher.teachers import Teacher, Teachers, check_teachers


def teachers(weighting="fixed", temperature=1.0, route_by="data_source", keys=(None, None)):
    entries = (Teacher("strong", "/m/strong", keys[0], 3.0), Teacher("weak", "/m/weak", keys[1], 1.0))
    return Teachers(entries, route_by, weighting, temperature)


def test_fixed_weights_are_normalised_over_the_teachers_of_the_row():
    assert teachers().weights([0, 1], [[-1.0], [-2.0]], [1]) == [0.75, 0.25]
    assert teachers().weights([1], [[-2.0]], [1]) == [1.0]


def test_confidence_weights_are_a_softmax_of_mean_log_probs_over_generated_tokens():
    # m = mean over generated tokens (the observation token at position 1 is left out): −1 and −3
    own = [[-1.0, -50.0, -1.0], [-3.0, -50.0, -3.0]]
    got = teachers("confidence", temperature=2.0).weights([0, 1], own, [1, 0, 1])
    e = [math.exp(-1 / 2), math.exp(-3 / 2)]
    assert got == pytest.approx([e[0] / sum(e), e[1] / sum(e)])


def test_start_up_refusals_name_the_key():
    with pytest.raises(ConfigError, match=r"^distillation.teacher_models.weak.key: no row has data_source='nq'"):
        check_teachers(teachers(keys=(None, "nq")), {"gsm8k"}, uses_topk=False)
    with pytest.raises(ConfigError, match=r"^distillation.distillation_loss.loss_mode: a top-k mode reads one teacher"):
        check_teachers(teachers(), {"gsm8k"}, uses_topk=True)
    with pytest.raises(
        ConfigError, match=r"^distillation.teacher_models: no teacher scores the rows with data_source='x'"
    ):
        check_teachers(teachers(keys=("gsm8k", "gsm8k")), {"gsm8k", "x"}, uses_topk=False)
    check_teachers(teachers(keys=("gsm8k", "nq")), {"gsm8k", "nq"}, uses_topk=True)  # routed: one teacher a row
    bad = OmegaConf.create({"distillation": {"teacher_key": "turn", "teacher_models": {}}})
    with pytest.raises(ConfigError, match=r"^distillation.teacher_key: must be one of"):
        read_teachers(bad, "/m/t")
    one = read_teachers(OmegaConf.create({}), "/m/t")
    assert one.entries == (Teacher("teacher", "/m/t"),) and not one.several
