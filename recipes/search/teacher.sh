#!/usr/bin/env bash
# The search system's teacher: the cascaded Searcher → Answerer system (C-MAS: one Searcher given the
# whole question, then 4 Answerer candidates) trained with GRPO on answer EM; its final checkpoint is
# the frozen TEACHER_MODEL of recipes/multiagent_opd.sh. Also the comparator "C-MAS + RL".
# Environment as in recipes/multiagent_opd.sh (no TEACHER_MODEL).
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/../multiagent_opd.sh" \
  workflow.horizon=2 ++workflow.options.system=cascaded \
  ++algorithm.per_role.searcher.estimator=grpo ++algorithm.per_role.searcher.group_by=problem "$@"
