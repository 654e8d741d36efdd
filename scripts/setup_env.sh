#!/usr/bin/env bash
# Idempotent set-up of .venv/ at the repository root: torch (CPU build) first, then the project.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
stamp="$venv/.installed"
want="$(cat "$root/setup.py" "$root/constraints.txt" | sha256sum | cut -d' ' -f1)"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
command -v python3 >/dev/null || { echo "setup: python3 not found (Python >= 3.10 is required)" >&2; exit 1; }
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' || { echo "setup: Python >= 3.10 is required, found $(python3 --version)" >&2; exit 1; }
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
"${pip[@]}" --upgrade pip
"${pip[@]}" -c "$root/constraints.txt" torch
"${pip[@]}" -c "$root/constraints.txt" -e "$root[test]"
"$venv/bin/python" -c 'import torch, verl, verl_masopd; print(f"setup: torch {torch.__version__}, verl {verl.__version__}")'
echo "$want" > "$stamp"
