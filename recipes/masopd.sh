#!/usr/bin/env bash
# MAS-OPD on one domain with the paper's settings (D.5, docs/method.md "Common settings": the defaults of
# verl_masopd/config/masopd_trainer.yaml). Every argument after the domain is a Hydra override of
# `python -m verl_masopd.train`, e.g. algorithm.adv_estimator=magrpo for a baseline.
#
#   bash recipes/masopd.sh code|math [OVERRIDE ...]
#
# Environment:
#   STUDENT_MODEL  local folder of the student backbone in Hugging Face format, e.g. Qwen3-1.7B (required)
#   TEACHER_MODEL  local folder of the teacher, same tokenizer, e.g. Qwen3-8B (masopd and opd need it,
#                  unless TEACHER_SOURCE is frozen or live)
#   TEACHER_SOURCE path (default: the teacher is TEACHER_MODEL), frozen (each policy's starting weights)
#                  or live (each policy now): self-distillation, no TEACHER_MODEL read; with
#                  teacher.privileged=reference the teacher also reads the problem's reference
#   TRAIN_FILES    training parquet files written by data_prep, comma-separated (required)
#   VAL_FILES      held-out parquet files, comma-separated (optional)
#   MASOPD_CPU=1   CPU mode: the tiny world's models and problems (recipes/tiny_world.py, data
#                  into $MASOPD_CACHE, default .cache/cpu; variables set above win), engines in the
#                  driver process, and a preset (printed): with a tiny-world student,
#                  preset=tiny_world (qa: preset=tiny_search, the search world's budgets) and the
#                  prompt style the tiny models were built for; with your own STUDENT_MODEL,
#                  preset=small_cpu (the paper's prompts, 256-token replies, lr 5e-6) and your model's
#                  own settings
#                  The tiny world's teacher only comes with its student: with your own STUDENT_MODEL
#                  and no teacher named, a run that needs one stops and asks for TEACHER_MODEL or
#                  TEACHER_SOURCE=frozen|live; a TEACHER_MODEL of your own needs your STUDENT_MODEL
#   MASOPD_PRESET  the preset of the CPU mode by name (tiny_world, tiny_search, small_cpu, cpu)
#   PYTHON         interpreter (default .venv/bin/python when present, else python3)
# The overrides students.path=, teacher.model_path= and teacher.source= (also with + or ++) stand
# for STUDENT_MODEL, TEACHER_MODEL and TEACHER_SOURCE, and win over them.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
domain="${1:?usage: bash recipes/masopd.sh code|math [OVERRIDE ...]}"
shift
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$root/.venv/bin/python" ]; then PYTHON="$root/.venv/bin/python"; else PYTHON=python3; fi
fi

fail() { echo "recipes/masopd.sh: $*" >&2; exit 2; }
for arg in "$@"; do
  case "${arg#"${arg%%[!+]*}"}" in  # the override without its leading + or ++
    students.path=*) export STUDENT_MODEL="${arg#*=}" ;;
    teacher.model_path=null) unset TEACHER_MODEL ;;
    teacher.model_path=*) export TEACHER_MODEL="${arg#*=}" ;;
    teacher.source=*) TEACHER_SOURCE="${arg#*=}" ;;
  esac
done
teacher_source="${TEACHER_SOURCE:-path}"

cpu_overrides=()
teacher_check=0
if [ "${MASOPD_CPU:-0}" = 1 ]; then
  export VERL_PLATFORM=cpu RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"
  own_style="${MASOPD_PROMPT_STYLE:-}" own_student="${STUDENT_MODEL:-}" own_teacher="${TEACHER_MODEL:-}"
  world="$("$PYTHON" "$root/recipes/tiny_world.py" --cache "${MASOPD_CACHE:-$root/.cache/cpu}" --domain "$domain")"
  eval "$world"
  tiny="$MASOPD_TINY_MODELS"
  if [ "$teacher_source" = path ] && [ -z "$own_teacher" ] && [ "$tiny" = 0 ]; then
    unset TEACHER_MODEL  # the tiny teacher does not read your student's tokens
    teacher_check=1
  elif [ "$teacher_source" = path ] && [ -n "$own_teacher" ] && [ -z "$own_student" ] && [ "$MASOPD_TINY_TEACHER" = 0 ]; then
    fail "TEACHER_MODEL: $own_teacher does not have the tiny world's tokenizer: set STUDENT_MODEL to its student"
  fi
  if [ -n "${MASOPD_PRESET:-}" ]; then
    preset="$MASOPD_PRESET" why="MASOPD_PRESET"
  elif [ "$tiny" = 1 ]; then
    preset=tiny_world why="a tiny-world student"
    [ "$domain" = qa ] && preset=tiny_search
  else
    preset=small_cpu why="STUDENT_MODEL is not a tiny-world model; its own prompt settings are kept"
  fi
  cpu_overrides=("preset=$preset" engines.placement=local)
  if [ "$tiny" = 1 ]; then
    cpu_overrides+=("workflow.prompt_style=$MASOPD_PROMPT_STYLE")
  elif [ -n "$own_style" ]; then
    cpu_overrides+=("workflow.prompt_style=$own_style")
  fi
fi

# Hydra list of the comma-separated paths in variable $1, each checked to exist.
path_list() {
  local name="$1" items=() paths path
  IFS=, read -ra paths <<< "${!name}"
  for path in "${paths[@]}"; do
    [ -e "$path" ] || fail "$name: $path does not exist"
    items+=("'$path'")
  done
  local IFS=,
  echo "[${items[*]}]"
}

[ -n "${STUDENT_MODEL:-}" ] || fail "set STUDENT_MODEL to a local model folder (Hugging Face format, e.g. a Qwen3-1.7B download), or MASOPD_CPU=1 for the tiny offline models"
[ -d "$STUDENT_MODEL" ] || fail "STUDENT_MODEL: $STUDENT_MODEL is not a folder"
[ -n "${TRAIN_FILES:-}" ] || fail "set TRAIN_FILES to the training parquet file(s) written by data_prep (python -m data_prep ...)"
train_files="$(path_list TRAIN_FILES)"
inputs=("students.path=$STUDENT_MODEL" "data.train_files=$train_files")
if [ "$teacher_source" != path ]; then
  inputs+=("teacher.source=$teacher_source")  # the policies are their own teachers: TEACHER_MODEL is not read
elif [ -n "${TEACHER_MODEL:-}" ]; then
  [ -d "$TEACHER_MODEL" ] || fail "TEACHER_MODEL: $TEACHER_MODEL is not a folder"
  inputs+=("teacher.model_path=$TEACHER_MODEL")
fi
if [ -n "${VAL_FILES:-}" ]; then
  val_files="$(path_list VAL_FILES)"
  inputs+=("data.val_files=$val_files")
fi

command=(workflow.domain="$domain" "${cpu_overrides[@]}" "${inputs[@]}" "$@")
if [ "$teacher_check" = 1 ] && "$PYTHON" "$root/recipes/needs_teacher.py" "${command[@]}"; then
  fail "STUDENT_MODEL is your own model, whose tokenizer the tiny world's teacher does not share: set TEACHER_MODEL (a teacher with your model's tokenizer) or TEACHER_SOURCE=frozen|live"
fi
if [ "${MASOPD_CPU:-0}" = 1 ]; then echo "recipes/masopd.sh: CPU mode, preset=$preset ($why)" >&2; fi
exec "$PYTHON" -m verl_masopd.train "${command[@]}"
