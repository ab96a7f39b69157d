"""How every rig program ends, said once: `rig` itself (rig.cli) and each internal program run with
`python -m rig...` (the trainer, the torchrun shim, the binder, the JupyterLab and TensorBoard
servers, the pip gate, the contract check).

- an expected error (RigError) is one line, `ERROR <program>: <what is wrong and how to fix it>`
  (an option as the user typed it: rig.spelling), and its exit code: 1 unless it names another;
- Ctrl-C (KeyboardInterrupt) is exit 130, without a traceback;
- a bug shows its traceback (it is not caught);
- a child's exit code passes through: the program returns it.

`main` functions are wrapped with `@entry("<program>")`, so the rule holds however they are started
(`python -m`, a console script, `python -m pip` in a session). Logging is loaded only for the line.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from typing import ParamSpec

from rig import spelling
from rig.errors import RigError

P = ParamSpec("P")
INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a Ctrl-C


def error_line(e: RigError) -> str:
    """The line's text after `ERROR <program>: `: the option as the user typed it (`--gpus 9`, or
    make's `GPUS=9` under `make train`)."""
    return e.line(spelling.from_environ(os.environ))


def run(main: Callable[[], int], name: str = "rig") -> int:
    """main's exit code; a RigError as one ERROR line naming `name` and its exit code; Ctrl-C 130."""
    try:
        return main()
    except RigError as e:
        import logging  # only now: `rig --help` and `rig health` load no logging

        from rig import log

        log.setup()
        logging.getLogger("rig" if name == "rig" else f"rig.{name}").error("%s", error_line(e))
        return e.exit_code
    except KeyboardInterrupt:
        return INTERRUPTED


def entry(name: str) -> Callable[[Callable[P, int]], Callable[P, int]]:
    """A program's `main`, ending as `run` says (name: the program, as its ERROR line names it)."""

    def wrap(main: Callable[P, int]) -> Callable[P, int]:
        @functools.wraps(main)
        def wrapped(*args: P.args, **kwargs: P.kwargs) -> int:
            return run(lambda: main(*args, **kwargs), name)

        return wrapped

    return wrap


@contextlib.contextmanager
def bad_input_exits(code: int) -> Iterator[None]:
    """Inside: an expected error that names no exit code of its own (1) exits `code` instead, a
    program's own for bad input (the trainer's and the torchrun shim's 2)."""
    try:
        yield
    except RigError as e:
        if e.exit_code != 1:
            raise
        raise RigError(e.message, code, option=e.option, value=e.value) from None
