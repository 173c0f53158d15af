"""Exceptions that cross module boundaries. Only `cli` turns them into exit codes."""


class BadInput(Exception):
    """The user asked for something that cannot be done: one line, exit code 2."""


class BadCaseFile(BadInput):
    """A saved case could not be read (corrupt, truncated, pickle-bearing, unknown schema)."""

    def __init__(self, path: object, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path, self.why = path, why


class TargetLoadError(BadInput):
    """A target spec does not name loadable code."""


class DeviceModeError(BadInput):
    """The process's Triton mode (compiled or interpreter) cannot serve the asked device."""
