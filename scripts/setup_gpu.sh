#!/usr/bin/env bash
# Idempotent GPU set-up: the project with verl 0.9.1's GPU stack (its vllm and fsdp extras) in a
# virtualenv, .venv/ at the repository root unless VENV is given. The pip steps and their order are
# built by scripts/gpu_plan.py from verl's own metadata.
#   bash scripts/setup_gpu.sh [VENV]               install
#   bash scripts/setup_gpu.sh --print-plan [VENV]  print the pip steps in order; install nothing
#   bash scripts/setup_gpu.sh --dry-run            resolve the whole stack with pip in a throwaway
#                                                  virtualenv (no GPU needed) and print the versions
# torch comes from PyPI, whose torch 2.11.0 is the CUDA 13.0 build verl 0.9.1 tests with. TORCH_CUDA=cu128
# (any of PyTorch's cuXXX builds) takes it from https://download.pytorch.org/whl/cu128 instead;
# TORCH_INDEX_URL names another index. PYTHON picks the interpreter that makes the virtualenv.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fail() { echo "setup_gpu: $1" >&2; exit 1; }

mode=install
case "${1:-}" in
  --print-plan | --dry-run) mode="${1#--}"; shift ;;
  -*) fail "unknown option $1 (use --print-plan, --dry-run or a virtualenv path)" ;;
esac
venv="${1:-$root/.venv}"
stamp="$venv/.gpu-installed"
want="$(cat "$root/setup.py" "$root/scripts/setup_gpu.sh" "$root/scripts/gpu_plan.py" | sha256sum | cut -d' ' -f1)"
want="$want ${TORCH_CUDA:-} ${TORCH_INDEX_URL:-}"
if [ "$mode" = install ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi

# verl 0.9.1 requires Python >=3.10,<3.13; an existing virtualenv is checked, not the interpreter.
py="${PYTHON:-python3}"
if [ "$mode" != dry-run ] && [ -x "$venv/bin/python" ]; then
  py="$venv/bin/python"
fi
command -v "$py" >/dev/null || fail "$py not found (Python 3.10-3.12 is required by verl 0.9.1)"
version="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" || fail "$py does not run"
case "$version" in
  3.10 | 3.11 | 3.12) ;;
  *) fail "Python 3.10-3.12 is required by verl 0.9.1, $py is Python $version (set PYTHON)" ;;
esac

# The driver must support the CUDA major version of torch's build (CUDA 12.x: >= 525, 13.x: >= 580).
if command -v nvidia-smi >/dev/null; then
  driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)" || driver=""
  [ -n "$driver" ] || fail "nvidia-smi finds no NVIDIA driver or GPU"
  cuda="${TORCH_CUDA:-cu130}"
  case "$cuda" in
    cu12*) need=525 ;;
    cu13*) need=580 ;;
    *) need=0 ;;
  esac
  [ "${driver%%.*}" -ge "$need" ] \
    || fail "NVIDIA driver $driver is too old for torch's $cuda build (needs >= $need): update it or set TORCH_CUDA"
fi

plan="$root/scripts/gpu_plan.py"
case "$mode" in
  print-plan)
    exec "$py" "$plan" print "$venv/bin/python"
    ;;
  dry-run)
    scratch="$(mktemp -d)"
    trap 'rm -rf "$scratch"' EXIT
    "$py" -m venv "$scratch/venv"
    "$scratch/venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$scratch/venv/bin/python" "$plan" dry-run "$scratch/venv/bin/python"
    ;;
  install)
    [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
    # The plan reads verl's metadata through pip's --report, which a virtualenv's bundled pip may predate.
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$venv/bin/python" "$plan" install "$venv/bin/python"
    "$venv/bin/python" -c 'import torch, vllm, verl, verl_masopd
print(f"setup_gpu: torch {torch.__version__} (CUDA {torch.version.cuda}), vllm {vllm.__version__}, verl {verl.__version__}")'
    # Without flash-attn the set-up is complete but not final: the next run retries its build.
    if "$venv/bin/python" -m pip show --quiet flash-attn 2>/dev/null; then
      echo "$want" > "$stamp"
    fi
    ;;
esac
