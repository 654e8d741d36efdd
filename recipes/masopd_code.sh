#!/usr/bin/env bash
# MAS-OPD on the code workflow (Coder + Tester); environment and overrides as in recipes/masopd.sh.
#   STUDENT_MODEL=/models/Qwen3-1.7B TEACHER_MODEL=/models/Qwen3-8B TRAIN_FILES=codecontests_train.parquet \
#     bash recipes/masopd_code.sh [OVERRIDE ...]
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/masopd.sh" code "$@"
