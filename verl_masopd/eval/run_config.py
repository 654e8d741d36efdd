"""What an evaluation takes from a training checkpoint: the run's saved configuration and its
policies' weights.

A checkpoint is a `global_step_<k>` folder, or a run's checkpoint root (trainer.default_local_dir),
which stands for the newest `global_step_<k>` under it. Before anything is read, the checkpoint's
config and policy weights (`EVAL_FILES`) are verified against its manifest: a missing, truncated
or altered file is named (a checkpoint without manifest is used unverified). From its
`config.yaml` the evaluation reads the system the policies were trained in (`RUN_KEYS`); a flag
given on the command line overrides the saved value, and without a checkpoint the flags'
defaults (`DEFAULTS`) apply. The workflow's options (`workflow.options`, e.g. the search team's
retriever and waves) are merged key by key: each `--workflow-option KEY=VALUE` replaces that key
of the saved options and keeps the others.
Policy p's weights are `<checkpoint>/policy_<p>/huggingface`.
"""

from __future__ import annotations

from argparse import Namespace
from pathlib import Path

import yaml
from omegaconf import OmegaConf

from verl_masopd.options.defaults import packaged_default
from verl_masopd.trainer.checkpoint import CONFIG_FILE, CheckpointError, step_folders, verify_checkpoint

# eval argument -> the training config key it mirrors
RUN_KEYS = {
    "imports": "imports",
    "workflow": "workflow.name",
    "agents_per_role": "workflow.agents_per_role",
    "horizon": "workflow.horizon",
    "policy_sharing": "workflow.policy_sharing",
    "prompt_style": "workflow.prompt_style",
    "context_layout": "workflow.context_layout",
    "workflow_options": "workflow.options",
    "max_new_tokens": "data.max_response_length",
}
# What an evaluation reads of a checkpoint (fnmatch patterns of relative paths), verified first.
EVAL_FILES = (CONFIG_FILE, "policy_*/huggingface/*")
# without a checkpoint: the training config's defaults of the same keys
DEFAULTS = {arg: packaged_default(key) for arg, key in RUN_KEYS.items()}


def checkpoint_folder(path: str) -> Path:
    """The `global_step_<k>` folder `path` names: itself, or the newest under a checkpoint root,
    with its `EVAL_FILES` verified; ValueError naming the damaged file (never an older checkpoint
    in its place)."""
    folder = Path(path).expanduser()
    if not (folder / CONFIG_FILE).is_file():
        found = step_folders(folder)
        if not found:
            raise ValueError(f"--checkpoint {path}: neither a checkpoint ({CONFIG_FILE}) nor a folder of checkpoints")
        folder = found[-1]
        if not (folder / CONFIG_FILE).is_file():
            raise ValueError(
                f"--checkpoint {path}: its newest checkpoint {folder.name} is incomplete (no {CONFIG_FILE})"
            )
    try:
        verify_checkpoint(folder, EVAL_FILES)
    except CheckpointError as e:
        raise ValueError(f"--checkpoint {path}: {e}") from None
    return folder


def run_settings(checkpoint: Path) -> dict:
    """{eval argument: its value in the checkpoint's run configuration} for the keys the run set."""
    cfg = OmegaConf.load(checkpoint / CONFIG_FILE)
    values = {arg: OmegaConf.select(cfg, key) for arg, key in RUN_KEYS.items()}
    return {arg: OmegaConf.to_object(v) if OmegaConf.is_config(v) else v for arg, v in values.items() if v is not None}


def resolve_run_arguments(args: Namespace) -> Path | None:
    """Fills every `RUN_KEYS` argument the command line left unset (None): from the checkpoint's
    run configuration when `args.checkpoint` is given (which then names the checkpoint folder),
    else from `DEFAULTS`; `args.workflow_options` (the --workflow-option items) becomes the
    saved or default options updated with them. Returns the checkpoint folder (None without one)."""
    checkpoint = checkpoint_folder(args.checkpoint) if args.checkpoint else None
    if checkpoint is not None:
        args.checkpoint = str(checkpoint.resolve())
    saved = run_settings(checkpoint) if checkpoint is not None else {}
    given = option_values(args.workflow_options or [])
    args.workflow_options = {**saved.get("workflow_options", DEFAULTS["workflow_options"]), **given}
    for arg in RUN_KEYS:
        if getattr(args, arg) is None:
            setattr(args, arg, saved.get(arg, DEFAULTS[arg]))
    return checkpoint


def option_values(items: list[str]) -> dict:
    """{KEY: VALUE} of --workflow-option KEY=VALUE items, each VALUE read as YAML (`3`, `0.5`,
    `true`, `{search: query}`; a bare word or a path is a string); a later KEY wins."""
    values = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--workflow-option {item!r}: expected KEY=VALUE")
        if key == "prompt_style":
            raise ValueError(f"--workflow-option {item!r}: the prompt style is --prompt-style")
        try:
            values[key] = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ValueError(f"--workflow-option {item!r}: not a YAML value ({str(e).splitlines()[0]})") from None
    return values


def policy_model(checkpoint: Path, policy: str) -> str:
    """The Hugging Face weights of `policy` in `checkpoint`."""
    return str(checkpoint / f"policy_{policy}" / "huggingface")
