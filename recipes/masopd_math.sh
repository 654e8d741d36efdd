#!/usr/bin/env bash
# MAS-OPD on the math workflow (Reasoner + Tool-User); environment and overrides as in recipes/masopd.sh.
#   STUDENT_MODEL=/models/Qwen3-1.7B TEACHER_MODEL=/models/Qwen3-8B TRAIN_FILES=polaris.parquet \
#     bash recipes/masopd_math.sh [OVERRIDE ...]
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/masopd.sh" math "$@"
