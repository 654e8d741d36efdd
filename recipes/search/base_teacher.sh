#!/usr/bin/env bash
# Ablation: the base model as the Searchers' teacher (TEACHER_MODEL = STUDENT_MODEL), the rest as in
# recipes/multiagent_opd.sh, whose environment this takes.
set -euo pipefail
: "${STUDENT_MODEL:?set STUDENT_MODEL (it is also the teacher here)}"
TEACHER_MODEL="$STUDENT_MODEL" exec bash "$(dirname "${BASH_SOURCE[0]}")/../multiagent_opd.sh" "$@"
