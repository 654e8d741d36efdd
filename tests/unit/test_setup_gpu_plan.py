"""scripts/setup_gpu.sh: its plan (the ordered pip steps, pins from verl's own metadata), its checks of
Python and of the NVIDIA driver, and the attention the runs fall back to without flash-attn. Offline:
the plan is read from the verl installed here, or from a METADATA file put first on PYTHONPATH."""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "setup_gpu.sh"

STEPS = ["build tools", "torch", "flash-attn", "project", "project without flash-attn"]


def setup_gpu(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHON": sys.executable, **env}
    for name in ("TORCH_CUDA", "TORCH_INDEX_URL"):
        if name not in env:
            environment.pop(name, None)
    return subprocess.run(
        ["bash", str(SCRIPT), *args, str(tmp_path / "venv")],
        capture_output=True,
        text=True,
        env=environment,
        timeout=30,
    )


def printed_plan(tmp_path: Path, **env: str) -> dict[str, list[str]]:
    result = setup_gpu(tmp_path, "--print-plan", **env)
    assert result.returncode == 0, result.stderr
    steps = {}
    for line in result.stdout.strip().splitlines():
        number, name, command = re.fullmatch(r"(\d+)\. ([^:]+): (.+)", line).groups()
        assert int(number) == len(steps) + 1
        steps[name] = shlex.split(command)
    assert list(steps) == STEPS
    return steps


def requirements(argv: list[str]) -> list[str]:
    """What a step installs: the arguments after pip's options (-e takes the project's path)."""
    install = argv.index("install")
    args, out = argv[install + 1 :], []
    while args:
        arg = args.pop(0)
        if arg in ("-e", "--index-url"):
            args.pop(0)
        elif not arg.startswith("--"):
            out.append(arg)
    return out


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def verl_pins(extra: str) -> list[str]:
    return [r.split(";")[0].strip() for r in metadata.requires("verl") if r.endswith(f'extra == "{extra}"')]


def test_plan_installs_torch_then_flash_attn_then_the_project_with_verls_extras(tmp_path):
    steps = printed_plan(tmp_path)
    python = str(tmp_path / "venv" / "bin" / "python")
    assert all(argv[:4] == [python, "-m", "pip", "install"] for argv in steps.values())
    assert {"setuptools", "wheel", "packaging", "psutil", "ninja"} <= set(requirements(steps["build tools"]))

    assert metadata.version("verl") == "0.9.1"
    torch = [r for r in verl_pins("vllm") if re.match(r"torch(vision|audio)?==", r)]
    assert sorted(requirements(steps["torch"])) == sorted(torch) and len(torch) == 3

    flash_attn = steps["flash-attn"]
    assert "--no-build-isolation" in flash_attn
    assert requirements(flash_attn) == [r for r in verl_pins("flash-attn-cu130torch211") if r.startswith("flash-attn")]

    project = steps["project"]
    assert project[project.index("-e") + 1] == str(ROOT)
    (verl,) = requirements(project)
    extras, version = re.fullmatch(r"verl\[([^\]]+)\]==(\S+)", verl).groups()
    assert set(extras.split(",")) == {"vllm", "fsdp"} and version == "0.9.1"

    fallback = requirements(steps["project without flash-attn"])
    assert fallback[0] == "verl[vllm]==0.9.1"
    assert not [r for r in fallback if r.startswith("flash-attn")]
    fsdp_rest = [r for r in verl_pins("fsdp") if not r.startswith(("verl[", "torch"))]
    assert set(fsdp_rest) <= set(fallback)


def test_pins_follow_verls_metadata_not_a_copy(tmp_path):
    """A verl 0.9.1 with other pins, first on the path: the plan takes its pins, extras expanded."""
    dist_info = tmp_path / "site" / "verl-0.9.1.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: verl\nVersion: 0.9.1\nRequires-Dist: numpy\n"
        'Requires-Dist: torch==9.1.0; extra == "vllm"\n'
        'Requires-Dist: torchvision==9.2.0; extra == "vllm"\n'
        'Requires-Dist: torchaudio==9.1.0; extra == "vllm"\n'
        'Requires-Dist: vllm==9.0.0; extra == "vllm"\n'
        'Requires-Dist: flash-attn==9.9.9; extra == "attention"\n'
        'Requires-Dist: verl[attention]; extra == "fsdp"\n'
        'Requires-Dist: trl==9.3.0; extra == "fsdp"\n'
    )
    steps = printed_plan(tmp_path, PYTHONPATH=str(tmp_path / "site"))
    assert requirements(steps["torch"]) == ["torch==9.1.0", "torchvision==9.2.0", "torchaudio==9.1.0"]
    assert requirements(steps["flash-attn"]) == ["flash-attn==9.9.9"]
    assert requirements(steps["project without flash-attn"]) == ["verl[vllm]==0.9.1", "trl==9.3.0"]


def test_another_cuda_takes_torch_from_pytorchs_index(tmp_path):
    steps = printed_plan(tmp_path, TORCH_CUDA="cu128")
    torch = steps["torch"]
    assert torch[torch.index("--index-url") + 1] == "https://download.pytorch.org/whl/cu128"
    assert all("--index-url" not in steps[name] for name in STEPS if name != "torch")
    assert "--index-url" not in printed_plan(tmp_path)["torch"]


@pytest.mark.parametrize("flash_attn_builds", [True, False])
def test_install_runs_the_steps_and_goes_on_without_flash_attn(tmp_path, flash_attn_builds):
    """The install with a stand-in for the virtualenv's python that logs each pip command."""
    log = tmp_path / "pip.log"
    python = tmp_path / "python"
    failing = "" if flash_attn_builds else 'case "$*" in *flash-attn==*) exit 1 ;; esac'
    python.write_text(f'#!/bin/sh\necho "$*" >> {log}\n{failing}\n')
    python.chmod(0o755)
    plan = [sys.executable, str(ROOT / "scripts" / "gpu_plan.py"), "install", str(python)]
    result = subprocess.run(plan, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    commands = log.read_text().splitlines()
    assert len(commands) == 4
    assert "torch==" in commands[1] and "--no-build-isolation flash-attn==" in commands[2]
    if flash_attn_builds:
        assert commands[3].endswith(f"-e {ROOT} verl[vllm,fsdp]==0.9.1")
        assert "could not be built" not in result.stdout
    else:
        assert f"-e {ROOT} verl[vllm]==0.9.1 " in commands[3] and "flash-attn" not in commands[3]
        assert "flash-attn could not be built" in result.stdout and "sdpa_packed" in result.stdout


def test_a_missing_python_is_named(tmp_path):
    missing = str(tmp_path / "nowhere" / "python3")
    error = one_line_error(setup_gpu(tmp_path, "--print-plan", PYTHON=missing))
    assert error == f"setup_gpu: {missing} not found (Python 3.10-3.12 is required by verl 0.9.1)"


@pytest.mark.parametrize("version", ["3.9", "3.13"])
def test_a_wrong_python_version_is_named(tmp_path, version):
    python = tmp_path / "python3"
    python.write_text(f"#!/bin/sh\necho {version}\n")
    python.chmod(0o755)
    error = one_line_error(setup_gpu(tmp_path, "--print-plan", PYTHON=str(python)))
    assert error.startswith("setup_gpu: Python 3.10-3.12 is required by verl 0.9.1")
    assert error.endswith(f"{python} is Python {version} (set PYTHON)")


def fake_nvidia_smi(tmp_path: Path, script: str) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\n{script}\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}"


def test_an_old_driver_is_named_for_the_cuda_build_it_cannot_run(tmp_path):
    path = fake_nvidia_smi(tmp_path, "echo 535.104.05")
    error = one_line_error(setup_gpu(tmp_path, "--print-plan", PATH=path))
    assert error.startswith("setup_gpu: NVIDIA driver 535.104.05 is too old for torch's cu130 build (needs >= 580)")
    assert printed_plan(tmp_path, PATH=path, TORCH_CUDA="cu128")["torch"]
    assert printed_plan(tmp_path, PATH=fake_nvidia_smi(tmp_path, "echo 580.65.06"))["torch"]


def test_nvidia_smi_without_a_driver_is_named(tmp_path):
    path = fake_nvidia_smi(tmp_path, "echo 'NVIDIA-SMI has failed' >&2; exit 9")
    assert one_line_error(setup_gpu(tmp_path, "--print-plan", PATH=path)) == (
        "setup_gpu: nvidia-smi finds no NVIDIA driver or GPU"
    )


def test_cuda_without_flash_attn_warns_once_of_the_slower_attention(monkeypatch, caplog):
    from verl_masopd.platform import packed_attention

    monkeypatch.setattr(packed_attention.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(packed_attention.importlib.util, "find_spec", lambda name: None)
    packed_attention._warn_without_flash_attn.cache_clear()
    with caplog.at_level(logging.WARNING, logger=packed_attention.__name__):
        assert packed_attention.packed_attention_implementation() == packed_attention.PACKED_SDPA
        assert packed_attention.packed_attention_implementation() == packed_attention.PACKED_SDPA
    (record,) = [r for r in caplog.records if r.name == packed_attention.__name__]
    assert "flash-attn is not installed" in record.getMessage() and "sdpa_packed" in record.getMessage()
