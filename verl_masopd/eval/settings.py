"""The settings of an evaluation, written next to its records as settings.json.

The report compares them across runs: runs evaluated with other sampling, another number of
episodes per problem, another horizon or another benchmark file are not comparable.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

SETTINGS_FILE = "settings.json"


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def eval_settings(args, domain: str, problems: int) -> dict:
    """What an evaluation ran with (`args`: the eval CLI's parsed arguments)."""
    return {
        "data": str(Path(args.data).resolve()),
        "data_sha256": file_sha256(args.data),
        "limit": args.limit,
        "problems": problems,
        "domain": domain,
        "checkpoint": args.checkpoint,
        "imports": args.imports,
        "workflow": args.workflow,
        "horizon": args.horizon,
        "agents_per_role": args.agents_per_role,
        "policy_sharing": args.policy_sharing,
        "prompt_style": args.prompt_style,
        "context_layout": args.context_layout,
        "workflow_options": args.workflow_options,
        "k": args.k,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k,
        "max_new_tokens": args.max_new_tokens,
        "swap_roles": args.swap_roles,
        "teacher": args.teacher,
        "seed": args.seed,
        "engine": args.engine,
        "dtype": args.dtype,
    }


def write_settings(settings: dict, out_dir: Path) -> None:
    (out_dir / SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n")
