"""Whether a training command line needs a teacher model, for the recipes' CPU mode.

    python recipes/needs_teacher.py OVERRIDE ...

Exit status 0 when the estimator check of the trainer (verl_masopd/config/estimator.py) refuses the
overrides without teacher.model_path and accepts them with one; 1 otherwise (no teacher needed, or
a config the trainer refuses for another reason, which it then names itself). Composes the config
only: no model or data file is read.
"""

from __future__ import annotations

import sys

from verl_masopd.cli.quiet_import import import_verl_quietly

import_verl_quietly()

from verl_masopd.config import compose_config  # noqa: E402
from verl_masopd.config.estimator import validate_estimator_config  # noqa: E402


def accepted(overrides: list[str]) -> bool:
    try:
        validate_estimator_config(compose_config(overrides))
    except Exception:  # a Hydra or estimator refusal: the trainer names it
        return False
    return True


def main(argv: list[str]) -> int:
    needed = not accepted(argv) and accepted([*argv, "teacher.model_path=teacher"])
    return 0 if needed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
