#!/usr/bin/env bash
# Ablation: the Searchers trained by GRPO on the team's EM (grouped by question) instead of OPD;
# Leader and Answerer as in recipes/multiagent_opd.sh, whose environment this takes (no TEACHER_MODEL).
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/../multiagent_opd.sh" \
  ++algorithm.per_role.searcher.estimator=grpo ++algorithm.per_role.searcher.group_by=problem "$@"
