"""Math answer equivalence (math-verify) and program-output comparison."""

from verl_masopd.verify.compare import outputs_match
from verl_masopd.verify.equivalence import math_equal
from verl_masopd.verify.extract import extract_boxed, extract_hash_answer, extract_program_answer

__all__ = ["extract_boxed", "extract_hash_answer", "extract_program_answer", "math_equal", "outputs_match"]
