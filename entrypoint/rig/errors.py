"""The one expected-error type: printed as a single line, never as a traceback."""


class RigError(Exception):
    """A problem the user can fix. The message says what is wrong and how to fix it."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code
