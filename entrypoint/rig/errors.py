"""The one expected-error type: printed as a single line, never as a traceback."""

from __future__ import annotations

from rig.spelling import AS_PARSED, Spelling


class RigError(Exception):
    """A problem the user can fix. The message says what is wrong and how to fix it.

    option (with the value given): the option the problem is about, as rig's command line spells it
    (`--gpus`, `batch`); `line` starts the message with it as the user typed it (`--gpus 9` or make's
    `GPUS=9`), so a message never spells an option itself.
    """

    def __init__(
        self, message: str, exit_code: int = 1, *, option: str | None = None, value: object = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.option = option
        self.value = value

    def line(self, typed: Spelling = AS_PARSED) -> str:
        """The one line the user reads: '--gpus 9: only 4 GPU(s) are visible...'."""
        if self.option is None:
            return self.message
        named = self.option if self.value is None else typed(self.option, self.value)
        return f"{named}: {self.message}"

    def __str__(self) -> str:
        return self.line()
