"""verl-masopd: MAS-OPD and its baselines for multi-agent LLM systems, on verl."""

__version__ = "0.1.0"
