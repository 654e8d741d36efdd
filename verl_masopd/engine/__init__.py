"""A policy on verl's training engine: `PolicyEngine` (policy_engine.py, one model on verl's
`TrainingWorker` + FSDP2) and `Policy` (policy.py, an engine with its generation backend)."""
