"""Engine placement settings are checked before anything starts."""

import pytest

from verl_masopd.config.run import EnginesSection
from verl_masopd.options.errors import ConfigError
from verl_masopd.trainer.placement import check_gpu_request, cpu_pool_plan, gpu_layout


def test_more_gpus_than_ray_sees_stops_naming_the_key():
    check_gpu_request(engines=3, gpus_per_engine=2, available=6)
    with pytest.raises(
        ConfigError, match=r"engines.gpus_per_engine: 3 engines x 2 GPUs = 6 GPUs requested, but Ray sees 4"
    ):
        check_gpu_request(engines=3, gpus_per_engine=2, available=4)
    check_gpu_request(engines=2, gpus_per_engine=2, available=6, server_gpus=2)
    teacher = (
        r"2 engines x 2 GPUs \+ 4 GPUs of standalone vLLM servers \(teacher.backend=vllm; LoRA policies on vllm\) "
        r"= 8 GPUs requested"
    )
    with pytest.raises(ConfigError, match=teacher):
        check_gpu_request(engines=2, gpus_per_engine=2, available=6, server_gpus=4)


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"placement": "slurm"}, "engines.placement"),
        ({"gpus_per_engine": 0}, "engines.gpus_per_engine"),
        ({"dtype": "float8"}, "engines.dtype"),
        ({"placement_wait_s": 0}, "engines.placement_wait_s: must be > 0 seconds, got 0"),
        ({"placement_wait_s": float("inf")}, "engines.placement_wait_s"),
    ],
)
def test_bad_placement_settings_name_the_key(section, key):
    with pytest.raises(ConfigError, match=key):
        EnginesSection(
            **{
                "placement": "ray",
                "gpus_per_engine": 1,
                "dtype": "float32",
                "placement_wait_s": 300,
                "max_tokens_per_micro_batch": 16384,
                **section,
            }
        )


@pytest.mark.parametrize(
    ("engines", "node_cpus", "plan"),
    [
        (3, [2], [(2, 3)]),  # one node: one pool of min(engines, CPUs), the single-machine layout
        (4, [16], [(4, 4)]),
        (2, [1, 1], [(1, 1), (1, 1)]),  # the audit's cluster: one engine per one-CPU node
        (3, [1, 1], [(1, 2), (1, 1)]),
        (6, [4, 2], [(4, 4), (2, 2)]),  # shares follow the nodes' CPUs
        (1, [1, 8], [(1, 1)]),  # the largest node first
        (2, [0, 1], [(1, 2)]),  # a node without CPUs holds nothing
    ],
)
def test_cpu_engines_are_spread_over_the_nodes_in_proportion_to_their_cpus(engines, node_cpus, plan):
    assert cpu_pool_plan(engines, node_cpus) == plan


def test_a_cluster_without_cpus_is_named():
    with pytest.raises(ConfigError, match=r"engines.placement: the Ray cluster has no node with a CPU"):
        cpu_pool_plan(2, [0])


def test_an_engine_larger_than_a_node_takes_whole_nodes():
    assert gpu_layout(4, [8, 8]) == [4]
    assert gpu_layout(16, [8, 8]) == [8, 8]
    with pytest.raises(ConfigError, match=r"engines.gpus_per_engine: 12 GPUs per engine fit on no node"):
        gpu_layout(12, [8, 8])
    with pytest.raises(ConfigError, match=r"engines.gpus_per_engine"):
        gpu_layout(1, [0])
