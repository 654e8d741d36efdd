"""The training loop: one verl engine worker group per policy, a teacher worker group."""
