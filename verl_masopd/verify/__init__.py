"""Math answer equivalence (math-verify) and program-output comparison."""
