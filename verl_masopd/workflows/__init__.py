"""The multi-agent systems as pure Python (no torch): roles, prompts, parsing, steps, rewards, attribution."""
