"""The one error type for a bad or contradictory config, and the check that raises it.

Every start-up check (the trainer's sections, the estimators' option dataclasses) raises
`ConfigError` through `require`, with a one-line message that starts with the culprit's full
key, e.g. "algorithm.masopd.ras_clip: must be > 0, got 0".
"""


class ConfigError(ValueError):
    """A bad or contradictory config; the message names the key(s)."""


def require(condition: bool, key: str, message: str) -> None:
    """Raise a ConfigError "<key>: <message>" when `condition` is false."""
    if not condition:
        raise ConfigError(f"{key}: {message}")
