#!/usr/bin/env bash
# Role-conditioned on-policy distillation (A_k = s_k): no role advantage and no privileged
# attribution block in the teacher's context (needs TEACHER_MODEL).
# The MAS-OPD recipe of domain $DOMAIN (code or math, default code) with the baseline's keys;
# environment and further overrides as in recipes/masopd.sh.
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/../masopd_${DOMAIN:-code}.sh" algorithm.adv_estimator=opd pac.enable=false "$@"
