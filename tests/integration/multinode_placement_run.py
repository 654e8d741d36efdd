"""Places engines on a Ray cluster of two one-CPU nodes (Ray's own multi-node cluster on one
machine) and prints what happened as one JSON line:

    python multinode_placement_run.py MODEL_PATH

  nodes          the node of each engine's pool, in build order (the engines must span both nodes)
  log_prob_sums  each engine's summed log-probs of one fixed request (every engine answers)
  refused        the one-line error for one more engine while those two hold both CPUs, given 3 s
  refused_after_s how long that refusal took
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace

REQUEST = ([5, 6, 7, 8], [9, 10, 11])


def main(model_path: str) -> None:
    import ray
    from ray.cluster_utils import Cluster
    from ray.util import placement_group_table

    from verl_masopd.config.run import EnginesSection
    from verl_masopd.engine.policy_engine import EngineSettings
    from verl_masopd.options.errors import ConfigError
    from verl_masopd.trainer.placement import EnginePlacement

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    env = {key: os.environ[key] for key in ("VERL_PLATFORM", "RAY_AUTH_MODE")}
    ray.init(address=cluster.address, runtime_env={"env_vars": env}, logging_level="WARNING")
    try:
        section = EnginesSection(
            placement="ray", gpus_per_engine=1, dtype="float32", placement_wait_s=60, max_tokens_per_micro_batch=16384
        )
        placement = EnginePlacement(section, engines=2)
        settings = EngineSettings(model_path=model_path, forward_only=True)
        engines = [placement.build(settings, f"engine{i}") for i in range(2)]
        nodes = [placement_group_table(pool.pgs[0])["bundles_to_node_id"][0] for pool in placement.cpu_pools]
        sums = [_log_prob_sum(engine) for engine in engines]

        # the two engines' pools now hold both CPUs: a third engine cannot be granted one
        start = time.monotonic()
        try:
            EnginePlacement(replace(section, placement_wait_s=3), engines=1)
            refused = None
        except ConfigError as e:
            refused = str(e)
        print(
            json.dumps(
                {
                    "nodes": nodes,
                    "log_prob_sums": sums,
                    "refused": refused,
                    "refused_after_s": time.monotonic() - start,
                }
            ),
            flush=True,
        )
    finally:
        ray.shutdown()
        cluster.shutdown()


def _log_prob_sum(engine) -> float:
    import asyncio

    from verl_masopd.teacher.engine_scorer import EngineTeacherScorer
    from verl_masopd.teacher.scoring import ScoreRequest

    scores = asyncio.run(EngineTeacherScorer(engine, 0).score([ScoreRequest(*REQUEST)]))
    return float(sum(scores[0]))


if __name__ == "__main__":
    main(sys.argv[1])
