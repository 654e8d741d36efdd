#!/usr/bin/env bash
# The main job on the embedded default, on CPU: sets up .venv/, builds the tiny offline student and
# teacher and the built-in math problems into .cache/quickstart/ (once), trains MAS-OPD on the
# Reasoner + Tool-User workflow for the CPU preset's steps, then evaluates the trained policies on
# held-out built-in problems and prints the summary table. Extra arguments are Hydra overrides of
# the training run. Each run replaces .cache/quickstart/run/.
#
# The engines run as Ray worker groups (engines.placement=ray, the path GPU runs take): measured on
# 2 busy cores it fits the budget as well as engines in the driver process (README.md, "The main command").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup_env.sh"
python="$root/.venv/bin/python"
cache="$root/.cache/quickstart"
run="$cache/run"
export VERL_PLATFORM=cpu RAY_AUTH_MODE=disabled TOKENIZERS_PARALLELISM=false

world="$(env -u STUDENT_MODEL -u TEACHER_MODEL -u TRAIN_FILES -u VAL_FILES \
  "$python" "$root/recipes/tiny_world.py" --cache "$cache" --domain math)"
eval "$world"
rm -rf "$run"
mkdir -p "$run"

"$python" -m verl_masopd.train preset=cpu engines.placement=ray workflow.domain=math \
  students.path="$STUDENT_MODEL" teacher.model_path="$TEACHER_MODEL" data.train_files="['$TRAIN_FILES']" \
  trainer.default_local_dir="$run/checkpoints" \
  hydra.run.dir="$run/hydra" "$@" 2>&1 | tee "$run/train.log"

step="$(cat "$run/checkpoints/latest_checkpointed_iteration.txt")"
trained="$run/checkpoints/global_step_$step"
# The run's own horizon and response budget (the preset's unless overridden)
settings="$("$python" -c 'import sys, yaml; c = yaml.safe_load(open(sys.argv[1]))
print(c["workflow"]["horizon"], c["data"]["max_response_length"])' "$trained/config.yaml")"
read -r horizon max_new_tokens <<< "$settings"
echo
echo "quickstart: trained $step steps"
echo "  checkpoints  $trained (policy_*/huggingface: each policy in Hugging Face format)"
echo "  logs         $run/train.log, TensorBoard $run/checkpoints/tensorboard, Hydra $run/hydra"
echo "quickstart: evaluating on $(basename "$VAL_FILES") (evaluation sampling, horizon $horizon)"

"$python" -m verl_masopd.eval --data "$VAL_FILES" --workflow mas --horizon "$horizon" \
  --model "$trained/policy_reasoner/huggingface" --role-model tool_user="$trained/policy_tool_user/huggingface" \
  --max-new-tokens "$max_new_tokens" --out "$run/eval"
echo "quickstart: evaluation records and summary in $run/eval"
