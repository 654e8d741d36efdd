"""A frozen model (the teacher) behind standalone vLLM servers of its own, for `ServerTeacherScorer`.

verl's server manager without a worker group launches standalone replicas (`init_standalone`);
the servers are named `vllm_{name}_server_{replica}_0`. On CPU the replica is the CPU build's
(serving/vllm_cpu.py), without sleep mode, HTTP on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Mapping

from verl_masopd.config.run import ServingSection
from verl_masopd.serving.hybrid_policy import cpu_replica_class
from verl_masopd.serving.plans import plan_teacher_serving
from verl_masopd.serving.policy_servers import PolicyServerManager, server_actors
from verl_masopd.serving.teacher_scorer import ServerTeacherScorer


class VllmTeacher:
    """The teacher's server manager and a scorer over its client; `close` stops the servers.
    `composed`, `serving`, `device`: the run config's record, verl rollout keys and trainer.device
    (plans.py, `plan_teacher_serving`); `topk`: the top k the scorer will ask for (vLLM's max_logprobs)."""

    def __init__(
        self,
        composed: Mapping,
        serving: ServingSection,
        device: str,
        model_path: str,
        dtype: str,
        name: str = "teacher",
        topk: int = 0,
    ):
        config = plan_teacher_serving(composed, serving, device, model_path, dtype, max_logprobs=topk)
        self.manager = PolicyServerManager.create(
            config, server_prefix=f"vllm_{name}_", replica_class=cpu_replica_class(config)
        )
        self.scorer = ServerTeacherScorer(self.manager.get_client(), name=f"vllm_{name}_server")

    def close(self) -> None:
        import ray

        for actor in server_actors(self.manager):
            ray.kill(actor)
