#!/usr/bin/env bash
# The search system on its tiny world, on CPU: sets up .venv/, checks the shipped tiny search
# student and teacher against their manifest, writes the search world (its corpus, BM25 index and
# questions) into .cache/search_demo/ (once), evaluates the student's hierarchical team on held-out
# questions, trains it by MultiAgent-OPD (recipes/multiagent_opd.sh in CPU mode: the Searchers by
# OPD from the tiny teacher, the Leader and the Answerer by GRPO, one shared policy), evaluates the
# trained team on the same questions and prints the before/after table (held-out exact match ± its
# standard error, per hop count, relaxed EM, failures, tokens per episode) and the time of each
# part. Logs under .cache/search_demo/run/ (replaced by each run). Extra arguments are Hydra
# overrides of the training run.
#
# Environment: SEARCH_DEMO_QUESTIONS (held-out questions evaluated, default 100).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
started=$SECONDS
bash "$root/scripts/setup_env.sh"
python="$root/.venv/bin/python"
cache="$root/.cache/search_demo"
run="$cache/run"
export VERL_PLATFORM=cpu RAY_AUTH_MODE=disabled TOKENIZERS_PARALLELISM=false PYTHONWARNINGS=ignore
export PYTHON="$python" MASOPD_CPU=1 MASOPD_CACHE="$cache"

world="$(env -u STUDENT_MODEL -u TEACHER_MODEL -u TRAIN_FILES -u VAL_FILES -u RETRIEVER -u MASOPD_PROMPT_STYLE \
  "$python" "$root/recipes/tiny_world.py" --cache "$cache" --domain qa)"
eval "$world"
rm -rf "$run"
mkdir -p "$run"
questions="$run/heldout.parquet"
"$python" -c "import pandas, sys; pandas.read_parquet(sys.argv[1]).head(int(sys.argv[2])).to_parquet(sys.argv[3])" \
  "$VAL_FILES" "${SEARCH_DEMO_QUESTIONS:-100}" "$questions"
setup_s=$((SECONDS - started))

evaluate() {  # evaluate NAME EVAL_ARGUMENTS...
  "$python" -m verl_masopd.eval --data "$questions" --batch-size 50 "${@:2}" --out "$run/$1" > "$run/$1.log" 2>&1 \
    || { echo "search_demo: evaluation failed, see $run/$1.log" >&2; exit 1; }
}

echo "search_demo: evaluating the student's team on $(basename "$questions") (log: $run/eval_before.log)"
t=$SECONDS
# the budgets the tiny search models were built for (tiny_world/search_demos.py), as the trained run's
read -ra budgets <<< "$("$python" -c 'from verl_masopd.tiny_world.search_demos import HORIZONS, OPTIONS
print("--horizon", HORIZONS["hierarchical"], "--prompt-style", OPTIONS.pop("prompt_style"),
      *(f"--workflow-option={k}={v}" for k, v in OPTIONS.items()))')"
evaluate eval_before --model "$STUDENT_MODEL" --workflow search --policy-sharing shared --max-new-tokens 640 \
  --workflow-option "retriever=$RETRIEVER" "${budgets[@]}"
eval_before_s=$((SECONDS - t))

echo "search_demo: training MultiAgent-OPD with the tiny teacher (log: $run/train.log)"
t=$SECONDS
bash "$root/recipes/multiagent_opd.sh" trainer.default_local_dir="$run/checkpoints" hydra.run.dir="$run/hydra" \
  "$@" > "$run/train.log" 2>&1 || { echo "search_demo: training failed, see $run/train.log" >&2; exit 1; }
train_s=$((SECONDS - t))
step="$(cat "$run/checkpoints/latest_checkpointed_iteration.txt")"
trained="$run/checkpoints/global_step_$step"

echo "search_demo: evaluating the trained team ($step steps; checkpoints in $trained)"
t=$SECONDS
evaluate eval_after --checkpoint "$trained"
eval_after_s=$((SECONDS - t))

echo
"$python" -m verl_masopd.report.search_demo "$run/eval_before" "$run/eval_after" --out "$run"
echo
echo "search_demo: set-up ${setup_s}s, evaluation before ${eval_before_s}s, training ${train_s}s," \
  "evaluation after ${eval_after_s}s, total $((SECONDS - started))s"
