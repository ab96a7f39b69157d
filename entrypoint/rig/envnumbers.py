"""Numbers in the environment, read one way: every numeric `RIG_*` setting, and the launchers' own
(torchrun's RANK, WORLD_SIZE..., the schedulers' node counts), is a `Number` declared in the module
that owns the variable, with its bounds, unit and default.

A value that is not one is never ignored: it is one line that names the variable, what was given and
what it takes (`RIG_NCCL_TIMEOUT='soon': use whole seconds between 60 and 86400 (default 1800); ...`).
Unset, or set to nothing, is the default (unless the setting says an empty value is wrong too).
Values in, values out: nothing here reads os.environ itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from rig.errors import RigError


def _text(n: float) -> str:
    return str(int(n)) if float(n).is_integer() else f"{n:g}"


@dataclass(frozen=True)
class Number:
    """One numeric variable: low..high (high None: no upper bound; above: low itself excluded), whole
    numbers only or any finite number, in `unit` (plural: seconds, GiB; "" for a plain number)."""

    name: str
    low: float
    high: float | None = None
    default: float | None = None  # None: the variable must be set
    unit: str = ""
    whole: bool = False
    above: bool = False
    hint: str = ""  # what the number is for, or how to choose it: said after the range
    empty_is_unset: bool = True  # False: NAME= (set to nothing) is a bad value too

    def accepted(self) -> str:
        """What the variable takes: 'whole seconds between 60 and 86400', 'a number of GiB >= 0'."""
        kind = "a whole number" if self.whole else "a number"
        if self.high is None:
            bound = f"{'>' if self.above else '>='} {_text(self.low)}"
            return f"{kind} of {self.unit} {bound}" if self.unit else f"{kind} {bound}"
        span = f"between {_text(self.low)} and {_text(self.high)}"
        if self.above:
            span = f"above {_text(self.low)} and at most {_text(self.high)}"
        if self.unit:
            return f"{'whole ' if self.whole else ''}{self.unit} {span}"
        return f"{kind} {span}"

    def parse(self, raw: str) -> float | None:
        """The value raw spells, or None when it is not one this variable takes."""
        text = raw.strip()
        try:
            value = float(int(text)) if self.whole else float(text)
        except ValueError:
            return None
        if not math.isfinite(value) or value < self.low or (self.above and value == self.low):
            return None
        if self.high is not None and value > self.high:
            return None
        return value

    def problem(self, raw: str | None) -> str:
        """The one line for a value this variable does not take (None: unset where it must be set)."""
        given = f"{self.name} is not set" if raw is None else f"{self.name}={raw!r}"
        default = f" (default {_text(self.default)})" if self.default is not None else ""
        return f"{given}: use {self.accepted()}{default}" + (f"; {self.hint}" if self.hint else "")

    def read(self, environ: Mapping[str, str]) -> float:
        """The variable's value in environ; RigError (one line) for one it does not take."""
        raw = environ.get(self.name)
        if raw is None or (self.empty_is_unset and not raw.strip()):
            if self.default is None:
                raise RigError(self.problem(None))
            return self.default
        value = self.parse(raw)
        if value is None:
            raise RigError(self.problem(raw))
        return value

    def read_int(self, environ: Mapping[str, str]) -> int:
        """read(), for a whole-number variable."""
        assert self.whole, f"{self.name} is not a whole number"
        return int(self.read(environ))
