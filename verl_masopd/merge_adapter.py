"""Merge a LoRA adapter (PEFT's format) into its base model: a full Hugging Face checkpoint.

    python -m verl_masopd.merge_adapter --adapter DIR [--base PATH] --out DIR

DIR is an adapter folder (adapter_config.json, adapter_model.safetensors), e.g. a checkpoint's
`global_step_<n>/policy_<name>/adapter/`; --base defaults to the base model its config names
(base_model_name_or_path). The merged weights are W + (α / r) · B A in float32 (peft's
merge_and_unload), saved with the base's tokenizer through a temporary folder renamed to --out,
which must not exist. A missing adapter or base, or an existing --out, stops with one line
naming it (exit 2).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch

from verl_masopd.options.errors import ConfigError


def adapter_base(adapter: Path) -> str | None:
    """The base model the adapter's config names (None when it names none)."""
    config = adapter / "adapter_config.json"
    if not config.is_file():
        raise ConfigError(f"--adapter: no PEFT adapter at {adapter} (adapter_config.json missing)")
    return json.loads(config.read_text()).get("base_model_name_or_path") or None


def merge(adapter: Path, base: str, out: Path) -> None:
    """Writes the merged model and the base's tokenizer to `out` (through a temporary folder)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if out.exists():
        raise ConfigError(f"--out: {out} exists; merging never overwrites a folder")
    if not Path(base).is_dir():
        raise ConfigError(f"--base: no model folder at {base}")
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        merged.save_pretrained(staging)
        AutoTokenizer.from_pretrained(base).save_pretrained(staging)
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adapter", type=Path, required=True, help="PEFT adapter folder")
    parser.add_argument("--base", help="base model folder (default: the adapter config's base_model_name_or_path)")
    parser.add_argument("--out", type=Path, required=True, help="new folder for the merged model")
    args = parser.parse_args(argv)
    try:
        named = adapter_base(args.adapter)
        base = args.base or named
        if base is None:
            raise ConfigError(f"--adapter: {args.adapter / 'adapter_config.json'} names no base model; pass --base")
        merge(args.adapter, base, args.out)
    except ConfigError as e:
        print(f"merge_adapter: {e}", file=sys.stderr)
        return 2
    print(f"merged {args.adapter} into {base}: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
