#!/usr/bin/env bash
# MultiAgent-OPD: the hierarchical search team (Leader, Searchers, Answerer; docs/method.md, "The
# hierarchical search system") with role-selective supervision in one shared student policy:
# Searchers by OPD from the frozen teacher, the Leader by GRPO on the team's EM (grouped by question,
# every Leader reply of a team at whatever turn it came: teams hand over after different numbers of waves),
# the Answerer by GRPO on its candidates' EM (grouped by hand-over). Budgets are the workflow's
# defaults: 3 waves of at most 4 Searchers, 3 searches each, top-3 passages cut to 500 tokens,
# 4 Answerer candidates, 4 teams per question.
#
#   STUDENT_MODEL=/models/Qwen2.5-3B-Instruct TEACHER_MODEL=/checkpoints/cmas_grpo/huggingface \
#   TRAIN_FILES=nq_hotpotqa_train.parquet RETRIEVER=http://retriever:8000/retrieve \
#     bash recipes/multiagent_opd.sh [OVERRIDE ...]
#
# Environment as in recipes/masopd.sh, and:
#   RETRIEVER      a BM25 index folder (python -m verl_masopd.retrieval index) or the URL of a server for
#                  Search-R1's POST /retrieve API (required)
#   TEACHER_MODEL  the teacher trained by recipes/search/teacher.sh (C-MAS + GRPO)
#   MASOPD_CPU=1   the tiny search world: RETRIEVER, the models and the questions from
#                  recipes/tiny_world.py --domain qa, the budgets of preset=tiny_search (2 waves of at
#                  most 2 Searchers, 2 searches each, top-3 passages cut to 240 tokens, 2 candidates)
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"
root="$(cd "$here/.." && pwd)"
budget=(workflow.horizon=8)
if [ "${MASOPD_CPU:-0}" = 1 ]; then
  python="${PYTHON:-}"
  if [ -z "$python" ]; then
    if [ -x "$root/.venv/bin/python" ]; then python="$root/.venv/bin/python"; else python=python3; fi
  fi
  world="$("$python" "$here/tiny_world.py" --cache "${MASOPD_CACHE:-$root/.cache/cpu}" --domain qa)"
  eval "$(grep '^export RETRIEVER=' <<< "$world" || true)"  # the models and questions: masopd.sh's CPU mode
  budget=()
fi
[ -n "${RETRIEVER:-}" ] || { echo "recipes/multiagent_opd.sh: set RETRIEVER to a BM25 index folder or a retrieval server URL" >&2; exit 2; }
exec bash "$here/masopd.sh" qa \
  workflow.name=search "${budget[@]}" workflow.policy_sharing=shared "++workflow.options.retriever=$RETRIEVER" \
  algorithm.adv_estimator=grpo algorithm.grpo.group_by=problem_role pac.enable=false \
  ++algorithm.per_role.searcher.estimator=opd \
  ++algorithm.per_role.leader.estimator=grpo ++algorithm.per_role.leader.group_by=problem \
  ++algorithm.per_role.answerer.estimator=grpo ++algorithm.per_role.answerer.group_by=episode \
  "$@"
