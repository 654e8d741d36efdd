"""Isolated execution of model-written programs (docs/method.md, "Execution sandbox")."""

from verl_masopd.sandbox.call_based import wrap_call_based
from verl_masopd.sandbox.isolation import Isolation, isolation
from verl_masopd.sandbox.limits import ExecResult, Limits
from verl_masopd.sandbox.runner import run_many, run_program

__all__ = ["ExecResult", "Isolation", "Limits", "isolation", "run_many", "run_program", "wrap_call_based"]
