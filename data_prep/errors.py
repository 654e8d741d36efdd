"""The two ways a conversion step can refuse input."""


class DataError(ValueError):
    """Input that cannot be used at all (missing file, wrong format, bad row in a written file).

    The message names the file, and the row and field where there is one.
    """


class Dropped(Exception):
    """One source record that does not become a row; `reason` is counted in the summary."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
