#!/usr/bin/env bash
# The main job on the embedded default, on CPU, in the tiny world (verl_masopd/tiny_world): sets up
# .venv/, checks the shipped tiny student and teacher against their manifest, writes the math
# problems into .cache/quickstart/ (once), evaluates the student system on held-out problems,
# trains MAS-OPD from it with the tiny teacher, evaluates the trained system on the same problems
# and prints the before/after table (held-out team accuracy ± standard error, agreement, turns to
# agreement, accuracy per ladder level) and the time of each part. Library output goes to the log
# files under .cache/quickstart/run/ (replaced by each run). Extra arguments are Hydra overrides of
# the training run.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
started=$SECONDS
bash "$root/scripts/setup_env.sh"
python="$root/.venv/bin/python"
cache="$root/.cache/quickstart"
run="$cache/run"
export VERL_PLATFORM=cpu RAY_AUTH_MODE=disabled TOKENIZERS_PARALLELISM=false PYTHONWARNINGS=ignore

world="$(env -u STUDENT_MODEL -u TEACHER_MODEL -u TRAIN_FILES -u VAL_FILES -u MASOPD_PROMPT_STYLE \
  "$python" "$root/recipes/tiny_world.py" --cache "$cache" --domain math)"
eval "$world"
rm -rf "$run"
mkdir -p "$run"
setup_s=$((SECONDS - started))

horizon=2
max_new_tokens=24
evaluate() {  # evaluate NAME EVAL_ARGUMENTS...
  "$python" -m verl_masopd.eval --data "$VAL_FILES" --batch-size 100 "${@:2}" --out "$run/$1" > "$run/$1.log" 2>&1 \
    || { echo "quickstart: evaluation failed, see $run/$1.log" >&2; exit 1; }
}

echo "quickstart: evaluating the student system on $(basename "$VAL_FILES") (log: $run/eval_before.log)"
t=$SECONDS
evaluate eval_before --model "$STUDENT_MODEL" --workflow mas --prompt-style "$MASOPD_PROMPT_STYLE" \
  --horizon "$horizon" --max-new-tokens "$max_new_tokens"
eval_before_s=$((SECONDS - t))

echo "quickstart: training MAS-OPD with the tiny teacher (log: $run/train.log)"
t=$SECONDS
"$python" -m verl_masopd.train preset=tiny_world engines.placement=local workflow.domain=math \
  students.path="$STUDENT_MODEL" teacher.model_path="$TEACHER_MODEL" data.train_files="['$TRAIN_FILES']" \
  workflow.prompt_style="$MASOPD_PROMPT_STYLE" workflow.horizon=$horizon data.max_response_length=$max_new_tokens \
  trainer.default_local_dir="$run/checkpoints" hydra.run.dir="$run/hydra" "$@" > "$run/train.log" 2>&1 \
  || { echo "quickstart: training failed, see $run/train.log" >&2; exit 1; }
train_s=$((SECONDS - t))
step="$(cat "$run/checkpoints/latest_checkpointed_iteration.txt")"
trained="$run/checkpoints/global_step_$step"

echo "quickstart: evaluating the trained system ($step steps; checkpoints in $trained)"
t=$SECONDS
evaluate eval_after --checkpoint "$trained"
eval_after_s=$((SECONDS - t))

echo
"$python" -m verl_masopd.tiny_world.report "$run/eval_before" "$run/eval_after" --out "$run"
echo
echo "quickstart: set-up ${setup_s}s, evaluation before ${eval_before_s}s, training ${train_s}s," \
  "evaluation after ${eval_after_s}s, total $((SECONDS - started))s"
echo "quickstart: logs, evaluation records and TensorBoard under $run"
