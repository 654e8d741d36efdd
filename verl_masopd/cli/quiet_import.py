"""verl imported without its import-time announcements, for the command-line entry points.

While verl is imported it logs its platform choice at INFO ("Platform override from VERL_PLATFORM:
cpu") and warns once for each optional training engine it cannot find (torchtitan, veomni,
automodel, mindspeed, megatron). None of it concerns the run, and before a one-line start-up error
it is noise. `import_verl_quietly()` imports verl with its loggers at WARNING and those warnings
ignored; what verl logs afterwards, and in every other process, is unchanged.
"""

from __future__ import annotations

import os
import sys
import warnings


def import_verl_quietly() -> None:
    if "verl" in sys.modules:
        return
    saved = os.environ.get("VERL_LOGGING_LEVEL")
    os.environ["VERL_LOGGING_LEVEL"] = "WARNING"
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".* engine is not available", category=UserWarning)
            import verl  # noqa: F401
    finally:
        if saved is None:
            os.environ.pop("VERL_LOGGING_LEVEL", None)
        else:
            os.environ["VERL_LOGGING_LEVEL"] = saved
