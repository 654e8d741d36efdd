"""Where the verl engines of a run live: `engines.placement` = ray | local.

ray    one Ray worker group per engine (each policy, the teacher, the reference). On GPUs every
       engine gets a resource pool of its own with `engines.gpus_per_engine` GPUs; a run that
       asks for more GPUs than Ray sees (the vLLM teacher's servers counted) stops at start-up.
       On CPU all engines share one pool (several one-rank worker groups on the same bundle;
       separate one-CPU pools deadlock on a 2-CPU machine, shared/notes/verl-0.9.1.md).
local  every engine in the driver process as rank 0 of one gloo/nccl group (tests, debugging).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace

from omegaconf import DictConfig

from verl_masopd.trainer.config import ConfigError
from verl_masopd.trainer.engine import EngineSettings, PolicyEngine

PLACEMENTS = ("ray", "local")
WORKER_ENV = ("VERL_PLATFORM", "RAY_AUTH_MODE", "TOKENIZERS_PARALLELISM")


class EnginePlacement:
    def __init__(self, section: DictConfig, engines: int, num_cpus: int | None = None, server_gpus: int = 0):
        if section.placement not in PLACEMENTS:
            raise ConfigError(f"engines.placement: must be one of {PLACEMENTS}, got {section.placement!r}")
        if section.gpus_per_engine < 1:
            raise ConfigError(f"engines.gpus_per_engine: must be >= 1, got {section.gpus_per_engine}")
        self.mode = section.placement
        self.gpus_per_engine = int(section.gpus_per_engine)
        self.shared_pool = None
        if self.mode == "ray":
            self._start_ray(num_cpus)
            self._plan(engines, server_gpus)

    def build(self, settings: EngineSettings, name: str) -> PolicyEngine:
        """The engine for `settings`; `name` prefixes its Ray actors."""
        if self.mode == "local":
            return PolicyEngine.local(settings)
        if self.shared_pool is not None:
            return PolicyEngine.on_ray(settings, self.shared_pool, name_prefix=name)
        return PolicyEngine.on_ray(replace(settings, world_size=self.gpus_per_engine), name_prefix=name)

    def _start_ray(self, num_cpus: int | None) -> None:
        import ray

        if ray.is_initialized():
            return
        env = {key: os.environ[key] for key in WORKER_ENV if key in os.environ}
        if os.environ.get("RAY_ADDRESS"):
            ray.init(runtime_env={"env_vars": env}, include_dashboard=False)
        else:
            ray.init(
                address="local",
                num_cpus=num_cpus,
                include_dashboard=False,
                runtime_env={"env_vars": env},
                _temp_dir=tempfile.mkdtemp(prefix="ray-", dir="/tmp"),
                logging_level="WARNING",
            )

    def _plan(self, engines: int, server_gpus: int) -> None:
        import ray
        from verl.single_controller.ray import RayResourcePool
        from verl.utils.device import get_device_name

        if get_device_name() == "cpu":
            cpus = int(ray.cluster_resources().get("CPU", 1))
            self.shared_pool = RayResourcePool(
                process_on_nodes=[1], use_gpu=False, max_colocate_count=max(1, min(engines, cpus))
            )
            return
        check_gpu_request(engines, self.gpus_per_engine, int(ray.cluster_resources().get("GPU", 0)), server_gpus)


def check_gpu_request(engines: int, gpus_per_engine: int, available: int, server_gpus: int = 0) -> None:
    """Stop at start-up when the engines and the standalone servers (the vLLM teacher's `server_gpus`)
    ask for more GPUs than Ray sees."""
    needed = engines * gpus_per_engine + server_gpus
    if needed > available:
        servers = f" + {server_gpus} GPUs of the vLLM teacher (teacher.backend=vllm)" if server_gpus else ""
        raise ConfigError(
            f"engines.gpus_per_engine: {engines} engines x {gpus_per_engine} GPUs{servers} = {needed} GPUs "
            f"requested, but Ray sees {available}"
        )
