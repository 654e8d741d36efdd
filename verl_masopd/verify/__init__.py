"""Math answer equivalence (math-verify) and program-output comparison."""

from verl_masopd.verify.compare import DEFAULT_FLOAT_TOL, outputs_agree, outputs_match
from verl_masopd.verify.equivalence import math_equal
from verl_masopd.verify.extract import extract_boxed, extract_hash_answer, extract_program_answer

__all__ = [
    "DEFAULT_FLOAT_TOL",
    "extract_boxed",
    "extract_hash_answer",
    "extract_program_answer",
    "math_equal",
    "outputs_agree",
    "outputs_match",
]
