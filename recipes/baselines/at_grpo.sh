#!/usr/bin/env bash
# AT-GRPO: tree sampling, groups of (problem, agent, turn) with identical role histories.
# The MAS-OPD recipe of domain $DOMAIN (code or math, default code) with the baseline's keys;
# environment and further overrides as in recipes/masopd.sh.
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/../masopd_${DOMAIN:-code}.sh" algorithm.adv_estimator=at_grpo rollout.tree_sampling=true "$@"
