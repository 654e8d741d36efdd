#!/usr/bin/env bash
# Ablation: the Searchers without any loss (their rows leave the update: algos/frozen.py); Leader
# and Answerer as in recipes/multiagent_opd.sh, whose environment this takes (no TEACHER_MODEL).
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/../multiagent_opd.sh" ++algorithm.per_role.searcher.estimator=frozen "$@"
