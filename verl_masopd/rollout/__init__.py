"""The multi-agent rollout manager: episodes over generation backends, per-policy training batches."""
