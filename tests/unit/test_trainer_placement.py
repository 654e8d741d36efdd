"""Engine placement settings are checked before anything starts."""

import pytest
from omegaconf import OmegaConf

from verl_masopd.trainer.config import ConfigError
from verl_masopd.trainer.placement import EnginePlacement, check_gpu_request


def test_more_gpus_than_ray_sees_stops_naming_the_key():
    check_gpu_request(engines=3, gpus_per_engine=2, available=6)
    with pytest.raises(
        ConfigError, match=r"engines.gpus_per_engine: 3 engines x 2 GPUs = 6 GPUs requested, but Ray sees 4"
    ):
        check_gpu_request(engines=3, gpus_per_engine=2, available=4)
    check_gpu_request(engines=2, gpus_per_engine=2, available=6, server_gpus=2)
    teacher = r"2 engines x 2 GPUs \+ 4 GPUs of the vLLM teacher \(teacher.backend=vllm\) = 8 GPUs requested"
    with pytest.raises(ConfigError, match=teacher):
        check_gpu_request(engines=2, gpus_per_engine=2, available=6, server_gpus=4)


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"placement": "slurm", "gpus_per_engine": 1}, "engines.placement"),
        ({"placement": "local", "gpus_per_engine": 0}, "engines.gpus_per_engine"),
    ],
)
def test_bad_placement_settings_name_the_key(section, key):
    with pytest.raises(ConfigError, match=key):
        EnginePlacement(OmegaConf.create(section), engines=2)
