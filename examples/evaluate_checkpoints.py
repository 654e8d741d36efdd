"""Evaluating saved checkpoints from Python: each checkpoint plays the system its run trained.

    python examples/evaluate_checkpoints.py --data held_out.parquet --checkpoint RUN/checkpoints/global_step_8 \
        --checkpoint OTHER_RUN/checkpoints --k 4

A checkpoint is a `global_step_<k>` folder or a run's checkpoint folder (its newest checkpoint).
For each one this prints a line of JSON: accuracy, agreement and turns over k episodes per problem.
The command-line evaluation (`python -m verl_masopd.eval --checkpoint ...`) does the same and
writes every record; this file shows the pieces, to build other evaluations from.
"""

import argparse
import asyncio
import json

from verl_masopd.eval.__main__ import load_problems
from verl_masopd.eval.run_config import DEFAULTS, checkpoint_folder, policy_model, run_settings
from verl_masopd.rollout.backend import SamplingParams
from verl_masopd.rollout.evaluation import evaluate
from verl_masopd.rollout.hf_backend import HFBackend
from verl_masopd.rollout.manager import RolloutManager
from verl_masopd.rollout.policies import policies_of
from verl_masopd.rollout.summary import summarize
from verl_masopd.workflows import make_workflow


def evaluate_checkpoint(path: str, problems, k: int) -> dict:
    checkpoint = checkpoint_folder(path)
    # The system the run trained, from the config.yaml saved with every checkpoint.
    run = {**DEFAULTS, **run_settings(checkpoint)}
    workflow = make_workflow(
        run["workflow"],
        problems[0].domain,
        run["agents_per_role"],
        run["horizon"],
        prompt_style=run["prompt_style"],
        **run["workflow_options"],
    )
    # One generation backend per trained policy ("role" sharing: one per role), with its weights.
    policies = policies_of(workflow.agents, run["policy_sharing"])
    backends = {policy: HFBackend(policy_model(checkpoint, policy)) for policy in policies}
    # The evaluation sampling of docs/method.md, "Common settings", with the run's response budget.
    sampling = SamplingParams(temperature=0.6, top_p=0.95, top_k=20, max_new_tokens=run["max_new_tokens"])
    with RolloutManager(
        workflow,
        backends,
        backends[policies[0]].tokenizer,
        policy_sharing=run["policy_sharing"],
        sampling=sampling,
        context_layout=run["context_layout"],
    ) as manager:
        # One record per problem: its k episodes, their turns, verdicts and correctness.
        records = asyncio.run(evaluate(manager, problems, k, batch_size=32))
    summary = summarize(records, run["horizon"])
    return {"checkpoint": str(checkpoint), **{key: summary[key] for key in ("accuracy", "agreement@0", "avg_turns")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="parquet file of held-out problems (one domain)")
    parser.add_argument("--checkpoint", action="append", required=True, help="repeatable")
    parser.add_argument("--k", type=int, default=1, help="episodes per problem")
    args = parser.parse_args()
    problems = load_problems(args.data, limit=None)
    for path in args.checkpoint:
        print(json.dumps(evaluate_checkpoint(path, problems, args.k)))


if __name__ == "__main__":
    main()
