#!/usr/bin/env bash
# A real model learning on CPU: sets up .venv/, fetches SmolLM2-135M-Instruct (python -m
# verl_masopd.models, once), writes the arithmetic ladder's problems as plain text ("What is 7 - 3?"
# ... short word problems; verl_masopd/tiny_world/math_tasks.py), evaluates the untrained
# Reasoner–Tool-User team on held-out problems, trains it by MAS-OPD with the self-distillation
# teacher (each policy at step 0, reading the problem's reference solution: teacher.source=frozen,
# teacher.privileged=reference) through a LoRA adapter, evaluates the trained team on the same
# problems and prints the before/after table (held-out team accuracy ± its standard error,
# agreement, turns to agreement, each role's format violations) and the time of each part. These
# are the settings of benchmarks/real_model_learning.py's masopd_self arm. Logs under
# .cache/real_model_demo/run/ (replaced by each run). Extra arguments are Hydra overrides of the
# training run.
#
#   bash recipes/real_model_demo.sh [OVERRIDE ...]
#
# Environment: DEMO_PROBLEMS (held-out problems evaluated, default 32), DEMO_STEPS (training steps
# of 4 problems × 2 episodes, default 4).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
started=$SECONDS
bash "$root/scripts/setup_env.sh"
python="$root/.venv/bin/python"
cache="$root/.cache/real_model_demo"
run="$cache/run"
export VERL_PLATFORM=cpu RAY_AUTH_MODE=disabled TOKENIZERS_PARALLELISM=false PYTHONWARNINGS=ignore
mkdir -p "$cache"
rm -rf "$run"
mkdir -p "$run"

model="$cache/smollm2"
echo "real_model_demo: fetching SmolLM2-135M-Instruct into $model (log: $run/fetch.log)"
"$python" -m verl_masopd.models fetch smollm2-135m-instruct --out "$model" > "$run/fetch.log" 2>&1 \
  || { echo "real_model_demo: fetch failed, see $run/fetch.log" >&2; exit 1; }
# the ladder's first 1,024 training problems and its first DEMO_PROBLEMS held-out ones
"$python" - "$run" "${DEMO_PROBLEMS:-32}" <<'EOF'
import sys
from pathlib import Path
from verl_masopd.tiny_world.world import ensure_data
ensure_data(Path(sys.argv[1]), "math", 1024, int(sys.argv[2]))
EOF
train="$run/tiny_math_train1024.parquet"
heldout="$run/tiny_math_heldout${DEMO_PROBLEMS:-32}.parquet"
setup_s=$((SECONDS - started))

horizon=1
max_new_tokens=192
evaluate() {  # evaluate NAME EVAL_ARGUMENTS...
  "$python" -m verl_masopd.eval --data "$heldout" --batch-size 16 "${@:2}" --out "$run/$1" > "$run/$1.log" 2>&1 \
    || { echo "real_model_demo: evaluation failed, see $run/$1.log" >&2; exit 1; }
}

echo "real_model_demo: evaluating the untrained team on $(basename "$heldout") (log: $run/eval_before.log)"
t=$SECONDS
evaluate eval_before --model "$model" --workflow mas --horizon $horizon --max-new-tokens $max_new_tokens
eval_before_s=$((SECONDS - t))

echo "real_model_demo: training MAS-OPD with the self-distillation teacher, LoRA (log: $run/train.log)"
t=$SECONDS
"$python" -m verl_masopd.train preset=small_cpu engines.placement=local workflow.domain=math \
  students.path="$model" data.train_files="['$train']" teacher.source=frozen teacher.privileged=reference \
  workflow.horizon=$horizon data.max_response_length=$max_new_tokens \
  data.train_batch_size=4 actor_rollout_ref.actor.ppo_mini_batch_size=4 \
  actor_rollout_ref.model.lora_rank=16 actor_rollout_ref.model.lora_alpha=32 actor_rollout_ref.actor.optim.lr=5e-4 \
  trainer.total_training_steps="${DEMO_STEPS:-4}" trainer.save_freq=-1 \
  trainer.default_local_dir="$run/checkpoints" hydra.run.dir="$run/hydra" "$@" > "$run/train.log" 2>&1 \
  || { echo "real_model_demo: training failed, see $run/train.log" >&2; exit 1; }
train_s=$((SECONDS - t))
step="$(cat "$run/checkpoints/latest_checkpointed_iteration.txt")"
trained="$run/checkpoints/global_step_$step"

echo "real_model_demo: evaluating the trained team ($step steps; checkpoints in $trained)"
t=$SECONDS
evaluate eval_after --checkpoint "$trained"
eval_after_s=$((SECONDS - t))

echo
"$python" -m verl_masopd.tiny_world.report "$run/eval_before" "$run/eval_after" --out "$run"
echo
echo "real_model_demo: set-up ${setup_s}s, evaluation before ${eval_before_s}s, training ${train_s}s," \
  "evaluation after ${eval_after_s}s, total $((SECONDS - started))s"
