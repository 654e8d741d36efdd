#!/usr/bin/env bash
# CURE: one policy shared by Coder and Tester, rewards from the programs x tests execution matrix,
# KL to the reference policy. Code only; environment and further overrides as in recipes/masopd.sh.
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/../masopd_code.sh" algorithm.adv_estimator=cure workflow.policy_sharing=shared "$@"
