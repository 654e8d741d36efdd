#!/usr/bin/env bash
# Plain on-policy distillation: per-token teacher scores, no role advantage (needs TEACHER_MODEL).
# The MAS-OPD recipe of domain $DOMAIN (code or math, default code) with the baseline's keys;
# environment and further overrides as in recipes/masopd.sh.
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/../masopd_${DOMAIN:-code}.sh" algorithm.adv_estimator=opd "$@"
