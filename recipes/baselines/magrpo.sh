#!/usr/bin/env bash
# MAGRPO: Monte-Carlo return-to-go of the team reward, centred over the problem's episodes.
# The MAS-OPD recipe of domain $DOMAIN (code or math, default code) with the baseline's keys;
# environment and further overrides as in recipes/masopd.sh.
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/../masopd_${DOMAIN:-code}.sh" algorithm.adv_estimator=magrpo "$@"
