"""The pip steps of the GPU installation (scripts/setup_gpu.sh), built from verl's own metadata.

setup.py's `gpu` extra names verl's GPU extras (`verl[vllm,fsdp]==0.9.1`); every pin comes from
verl's Requires-Dist. flash-attn, which verl's fsdp extra pins, is published as a source
distribution whose setup.py imports torch, so pip's isolated build of it fails. Its authors
install it after torch without build isolation; its setup.py then fetches their prebuilt wheel
for this torch, CUDA and Python where one exists, and compiles otherwise. Hence the order: torch
at verl's pins, flash-attn, then the project with verl's extras, which the installed flash-attn
satisfies. Should flash-attn fail, the last step installs the same requirements without it.

Only the standard library: the plan is printed before the virtualenv has anything installed.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH = ("torch", "torchvision", "torchaudio")
FLASH_ATTN = "flash-attn"
PYTORCH_INDEX = "https://download.pytorch.org/whl"
# flash-attn's build requirements, which its build without isolation takes from the virtualenv.
BUILD_TOOLS = ["pip", "setuptools", "wheel", "packaging", "psutil", "ninja"]
NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")
EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([A-Za-z0-9._-]+)["']""")


def fail(message: str) -> SystemExit:
    return SystemExit(f"setup_gpu: {message}")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def name_of(requirement: str) -> str:
    return normalized(NAME.match(requirement).group(1))


def gpu_requirement() -> tuple[str, list[str], str]:
    """setup.py's `gpu` extra, e.g. verl[vllm,fsdp]==0.9.1, as (requirement, extras, version)."""
    for node in ast.parse((ROOT / "setup.py").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "EXTRAS_REQUIRE" for t in node.targets):
            (requirement,) = ast.literal_eval(node.value)["gpu"]
            found = re.fullmatch(r"verl\[([^\]]+)\]==(\S+)", requirement)
            if found is None:
                raise fail(f"setup.py's gpu extra {requirement!r} is not verl[extras]==version")
            return requirement, [normalized(e) for e in found.group(1).split(",")], found.group(2)
    raise fail("setup.py has no EXTRAS_REQUIRE")


def verl_requires(version: str) -> list[str]:
    """verl's Requires-Dist: the installed copy's when it is this version, else the index's (no download)."""
    try:
        installed = metadata.distribution("verl")
        if installed.version == version:
            return installed.requires or []
    except metadata.PackageNotFoundError:
        pass
    query = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed", "--quiet"]
    result = subprocess.run([*query, "--report", "-", f"verl=={version}"], capture_output=True, text=True)
    if result.returncode != 0:
        raise fail(f"cannot read verl {version}'s metadata from the index: {result.stderr.strip()[-300:]}")
    (verl,) = json.loads(result.stdout)["install"]
    return verl["metadata"].get("requires_dist", [])


def expand(requires: list[str], extras: list[str]) -> list[str]:
    """The requirements of verl[extras], with the extras verl's extras name (verl[verl-core]) expanded."""
    by_extra: dict[str, list[str]] = {}
    for line in requires:
        requirement, _, marker = (part.strip() for part in line.partition(";"))
        if not marker:
            continue  # verl's base requirements come with verl itself
        extra = EXTRA_MARKER.fullmatch(marker)
        if extra is None:
            raise fail(f"verl's requirement {line!r} has a marker other than extra == ...")
        by_extra.setdefault(normalized(extra.group(1)), []).append(requirement)
    out: list[str] = []
    seen: set[str] = set()

    def visit(extra: str) -> None:
        if extra in seen:
            return
        seen.add(extra)
        if extra not in by_extra:
            raise fail(f"verl defines no extra {extra!r}")
        for requirement in by_extra[extra]:
            if name_of(requirement) == "verl":
                for nested in NAME.match(requirement).group(2).split(","):
                    visit(normalized(nested))
            elif requirement not in out:
                out.append(requirement)

    for extra in extras:
        visit(extra)
    return out


@dataclass(frozen=True)
class Step:
    name: str
    options: list[str]
    requirements: list[str]

    def argv(self, python: str) -> list[str]:
        return [python, "-m", "pip", "install", "--disable-pip-version-check", *self.options, *self.requirements]


def plan(torch_index: str | None) -> tuple[list[Step], list[str]]:
    """The ordered pip steps ("project without flash-attn" runs only if flash-attn fails) and verl's
    GPU requirements, its extras expanded."""
    requirement, extras, version = gpu_requirement()
    requires = verl_requires(version)
    stack = expand(requires, extras)
    torch = [r for r in stack if name_of(r) in TORCH]
    flash_attn = [r for r in stack if name_of(r) == FLASH_ATTN]
    missing = [name for name in (*TORCH, FLASH_ATTN) if name not in map(name_of, torch + flash_attn)]
    if missing:
        raise fail(f"verl[{','.join(extras)}]=={version} pins no {', '.join(missing)}")
    # Without flash-attn: verl with those of its extras that do not pin it, plus the rest of the others.
    kept = [extra for extra in extras if FLASH_ATTN not in map(name_of, expand(requires, [extra]))]
    covered = expand(requires, kept)
    rest = [r for r in stack if name_of(r) != FLASH_ATTN and r not in covered]
    verl = f"verl[{','.join(kept)}]=={version}" if kept else f"verl=={version}"
    steps = [
        Step("build tools", ["--upgrade"], BUILD_TOOLS),
        Step("torch", ["--index-url", torch_index] if torch_index else [], torch),
        Step("flash-attn", ["--no-build-isolation"], flash_attn),
        Step("project", ["-e", str(ROOT)], [requirement]),
        Step("project without flash-attn", ["-e", str(ROOT)], [verl, *rest]),
    ]
    return steps, stack


def run(step: Step, python: str) -> bool:
    argv = step.argv(python)
    print("+", shlex.join(argv), flush=True)
    return subprocess.run(argv).returncode == 0


def install(steps: dict[str, Step], python: str) -> None:
    for name in ("build tools", "torch"):
        if not run(steps[name], python):
            raise fail(f"the {name} step failed (see above)")
    project = steps["project"]
    if not run(steps["flash-attn"], python):
        print(
            "setup_gpu: flash-attn could not be built (see above); installing without it. Training then attends "
            "with sdpa_packed, which is slower. Its build needs nvcc of torch's CUDA major version; re-run to retry.",
            flush=True,
        )
        project = steps["project without flash-attn"]
    if not run(project, python):
        raise fail(f"the {project.name} step failed (see above)")


def dry_run(steps: dict[str, Step], stack: list[str], python: str, torch_index: str | None) -> None:
    """Resolve the whole stack at once and install nothing: versions from the index's metadata, no GPU.

    flash-attn is left out, since resolving a source distribution builds it; its pin is checked
    against the versions the index lists instead.
    """
    # One resolution takes the rest from PyPI, so PyTorch's index is an extra one here: pip prefers
    # its build of the pinned torch (2.11.0+cu128 sorts above 2.11.0).
    index = ["--extra-index-url", torch_index] if torch_index else []
    without_flash_attn = steps["project without flash-attn"]
    whole = Step(
        "whole stack",
        ["--dry-run", "--ignore-installed", "--quiet", "--report", "-", *index, *without_flash_attn.options],
        [*BUILD_TOOLS, *steps["torch"].requirements, *without_flash_attn.requirements],
    )
    result = subprocess.run(whole.argv(python), capture_output=True, text=True)
    if result.returncode != 0:
        raise fail(f"pip cannot resolve the GPU stack:\n{result.stderr.strip()}")
    report = json.loads(result.stdout)["install"]
    versions = {normalized(item["metadata"]["name"]): item["metadata"]["version"] for item in report}

    (flash_attn,) = steps["flash-attn"].requirements
    pinned = flash_attn.partition("==")[2]
    query = [python, "-m", "pip", "index", "versions", "--json", FLASH_ATTN]
    listed = subprocess.run(query, capture_output=True, text=True)
    if listed.returncode != 0 or pinned not in json.loads(listed.stdout)["versions"]:
        raise fail(f"the index lists no {flash_attn}: {listed.stderr.strip()[-300:]}")

    cuda = [f"{name} {v}" for name, v in versions.items() if name.startswith(("cuda-toolkit", "nvidia-cuda-runtime"))]
    print(f"setup_gpu: dry run, {len(versions)} packages would be installed (CUDA libraries: {', '.join(cuda)}):")
    # The project, verl, and every package verl's GPU extras constrain (the rest follow from them).
    shown = {"verl-masopd", "verl", *(name_of(r) for r in stack if NAME.sub("", r, count=1).strip())}
    for name in sorted(shown - {FLASH_ATTN}):
        print(f"  {name} {versions[name]}")
    print(f"  {FLASH_ATTN} {pinned} (a source distribution on the index: built after torch, not resolved here)")


def main(argv: list[str]) -> None:
    """gpu_plan.py {print,install,dry-run} PYTHON: PYTHON is the virtualenv's interpreter."""
    mode, python = argv
    torch_cuda = os.environ.get("TORCH_CUDA")
    torch_index = os.environ.get("TORCH_INDEX_URL") or (f"{PYTORCH_INDEX}/{torch_cuda}" if torch_cuda else None)
    steps, stack = plan(torch_index)
    if mode == "print":
        for number, step in enumerate(steps, 1):
            print(f"{number}. {step.name}: {shlex.join(step.argv(python))}")
    elif mode == "install":
        install({step.name: step for step in steps}, python)
    else:
        dry_run({step.name: step for step in steps}, stack, python, torch_index)


if __name__ == "__main__":
    main(sys.argv[1:])
