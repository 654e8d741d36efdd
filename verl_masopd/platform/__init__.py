"""The CPU platform that lets verl's engine run without an accelerator (VERL_PLATFORM=cpu)."""
