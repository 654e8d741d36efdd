#!/usr/bin/env bash
# Comparator: the Prompted Critic. The Searchers trained by GRPO (grouped by question) on a 0–1 score
# of each report from the teacher prompted as a judge (algos/judge_grpo.py, teacher/judging.py);
# Leader and Answerer as in recipes/multiagent_opd.sh, whose environment this takes (TEACHER_MODEL:
# the judge).
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/../multiagent_opd.sh" \
  ++algorithm.per_role.searcher.estimator=judge_grpo ++algorithm.per_role.searcher.group_by=problem "$@"
