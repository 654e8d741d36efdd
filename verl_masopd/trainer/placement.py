"""Where the verl engines of a run live: `engines.placement` = ray | local.

ray    one Ray worker group per engine (each policy, the teacher, the reference).
       GPUs: every engine gets a resource pool of its own with `engines.gpus_per_engine` GPUs, on
       one node when a node has that many, else in equal shares of whole nodes (FSDP spans them);
       a run that asks for more GPUs than Ray sees (the vLLM teacher's servers counted) stops.
       CPU: the engines share pools, one per node in use, each a single bundle of at most that
       node's CPUs holding several one-rank worker groups (one-CPU pools of their own deadlock as
       soon as the engines outnumber the CPUs, 3 engines on 2 CPUs). The engines are spread over
       the nodes in proportion to their CPUs, so a cluster of small nodes holds them all.
       Before any engine starts, placement groups of the plan's exact shape must be granted within
       `engines.placement_wait_s`; otherwise the start stops, naming what was asked for and what
       the cluster has (a bundle no node can ever hold would otherwise wait forever in verl).
local  every engine in the driver process as rank 0 of one gloo/nccl group (tests, debugging).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace

from verl_masopd.config.run import EnginesSection
from verl_masopd.engine.policy_engine import EngineSettings, PolicyEngine
from verl_masopd.options.errors import ConfigError

WORKER_ENV = ("VERL_PLATFORM", "RAY_AUTH_MODE", "TOKENIZERS_PARALLELISM")


class EnginePlacement:
    def __init__(self, section: EnginesSection, engines: int, num_cpus: int | None = None, server_gpus: int = 0):
        self.mode = section.placement
        self.gpus_per_engine = section.gpus_per_engine
        self.wait_s = section.placement_wait_s
        self.cpu_pools: list = []
        self.gpu_layout: list[int] = []
        self._built = 0
        if self.mode == "ray":
            self._start_ray(num_cpus)
            self._plan(engines, server_gpus)

    def build(self, settings: EngineSettings, name: str) -> PolicyEngine:
        """The engine for `settings`; `name` prefixes its Ray actors."""
        if self.mode == "local":
            return PolicyEngine.local(settings)
        self._built += 1
        if self.cpu_pools:
            return PolicyEngine.on_ray(settings, self.cpu_pools[(self._built - 1) % len(self.cpu_pools)], name)
        from verl.single_controller.ray import RayResourcePool

        pool = RayResourcePool(process_on_nodes=self.gpu_layout, use_gpu=True, max_colocate_count=1)
        return PolicyEngine.on_ray(replace(settings, world_size=self.gpus_per_engine), pool, name_prefix=name)

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

        nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
        if get_device_name() == "cpu":
            if engines == 0:
                return
            plan = cpu_pool_plan(engines, [int(node.get("CPU", 0)) for node in nodes])
            groups = [[{"CPU": cpus}] for cpus, _ in plan]
            wait_for_placement(groups, "STRICT_PACK", self.wait_s)
            pools = [RayResourcePool(process_on_nodes=[1], use_gpu=False, max_colocate_count=c) for c, _ in plan]
            # engine i goes to the pool at position i in this order: each pool as often as it holds engines
            self.cpu_pools = [pool for pool, (_, n) in zip(pools, plan) for _ in range(n)]
            return
        check_gpu_request(engines, self.gpus_per_engine, int(ray.cluster_resources().get("GPU", 0)), server_gpus)
        self.gpu_layout = gpu_layout(self.gpus_per_engine, [int(node.get("GPU", 0)) for node in nodes])
        bundle = {"CPU": 1, "GPU": 1}
        wait_for_placement([[bundle] * n for n in self.gpu_layout] * engines, "STRICT_PACK", self.wait_s)


def cpu_pool_plan(engines: int, node_cpus: list[int]) -> list[tuple[int, int]]:
    """(bundle CPUs, engines) of each shared CPU pool: one pool per node in use, largest nodes first.

    Engines go one at a time to the pool with the fewest engines per CPU, so the nodes' shares
    follow their CPUs; a pool's bundle asks for min(its engines, its node's CPUs). One node: one
    pool of min(engines, CPUs), the single-machine layout.
    """
    cpus = sorted((c for c in node_cpus if c >= 1), reverse=True)[:engines]
    if not cpus:
        raise ConfigError(f"engines.placement: the Ray cluster has no node with a CPU (nodes' CPUs: {node_cpus})")
    held = [0] * len(cpus)
    for _ in range(engines):
        i = min(range(len(cpus)), key=lambda j: ((held[j] + 1) / cpus[j], j))
        held[i] += 1
    return [(min(n, c), n) for n, c in zip(held, cpus) if n > 0]


def gpu_layout(gpus_per_engine: int, node_gpus: list[int]) -> list[int]:
    """GPUs of one engine per node (verl's `process_on_nodes`): all on one node when a node has
    that many, else whole-node shares of the largest node's GPUs."""
    largest = max(node_gpus, default=0)
    if gpus_per_engine <= largest:
        return [gpus_per_engine]
    if largest == 0 or gpus_per_engine % largest:
        raise ConfigError(
            f"engines.gpus_per_engine: {gpus_per_engine} GPUs per engine fit on no node and are no multiple "
            f"of a node's GPUs (nodes' GPUs: {node_gpus})"
        )
    return [largest] * (gpus_per_engine // largest)


def wait_for_placement(groups: list[list[dict]], strategy: str, wait_s: float) -> None:
    """Ask Ray for placement groups of `groups`' bundles, all at once; stop when they are not granted
    within `wait_s` seconds, naming the request and the cluster. The groups are released again: the
    engines' own pools ask for the same shapes next."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    pgs = [placement_group(bundles, strategy=strategy) for bundles in groups]
    try:
        ready, _ = ray.wait([pg.ready() for pg in pgs], num_returns=len(pgs), timeout=wait_s)
        if len(ready) < len(pgs):
            asked = ", ".join(str(bundles) for bundles in groups)
            nodes = [
                {k: v for k, v in n["Resources"].items() if k in ("CPU", "GPU")} for n in ray.nodes() if n["Alive"]
            ]
            free = {k: v for k, v in ray.available_resources().items() if k in ("CPU", "GPU")}
            raise ConfigError(
                f"engines.placement: the engines' placement groups ({strategy}: {asked}) were not granted within "
                f"{wait_s:g} s (engines.placement_wait_s); the cluster's nodes have {nodes}, free now {free}"
            )
    finally:
        for pg in pgs:
            remove_placement_group(pg)


def _counted(resources: dict) -> dict:
    return {key: value for key, value in resources.items() if key in ("CPU", "GPU")}


def check_gpu_request(engines: int, gpus_per_engine: int, available: int, server_gpus: int = 0) -> None:
    """Stop at start-up when the engines and the standalone vLLM servers (`server_gpus`: the
    teacher's, and the LoRA policies' one per base model) ask for more GPUs than Ray sees."""
    needed = engines * gpus_per_engine + server_gpus
    if needed > available:
        servers = (
            f" + {server_gpus} GPUs of standalone vLLM servers (teacher.backend=vllm; LoRA policies on vllm)"
            if server_gpus
            else ""
        )
        raise ConfigError(
            f"engines.gpus_per_engine: {engines} engines x {gpus_per_engine} GPUs{servers} = {needed} GPUs "
            f"requested, but Ray sees {available}"
        )
