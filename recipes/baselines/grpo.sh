#!/usr/bin/env bash
# MAS+GRPO: verl's GRPO with the G rollouts of a problem grouped per role and turn.
# The MAS-OPD recipe of domain $DOMAIN (code or math, default code) with the baseline's keys;
# environment and further overrides as in recipes/masopd.sh.
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/../masopd_${DOMAIN:-code}.sh" algorithm.adv_estimator=grpo "$@"
