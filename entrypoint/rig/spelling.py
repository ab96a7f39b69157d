"""Options as the user typed them, so an error names what to change: `rig train --gpus 9` says
`--gpus 9`, `make train GPUS=9` says `GPUS=9`.

The Makefile's `train` target turns its variables into rig's options and says so with
RIG_ARGS_FROM=make; everything else is named as rig parsed it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

ARGS_FROM = "RIG_ARGS_FROM"
# The Makefile's `train` variables and the option each one becomes.
MAKE_VARIABLES = {
    "--gpus": "GPUS",
    "data": "DATA",
    "model": "MODEL",
    "epochs": "EPOCHS",
    "imgsz": "IMGSZ",
    "batch": "BATCH",
}


@dataclass(frozen=True)
class Spelling:
    from_make: bool = False

    def __call__(self, option: str, value: object) -> str:
        """'--gpus', 9 -> '--gpus 9'; 'batch', 7 -> 'batch=7'; from make: 'GPUS=9', 'BATCH=7'."""
        if self.from_make and option in MAKE_VARIABLES:
            return f"{MAKE_VARIABLES[option]}={value}"
        return f"{option} {value}" if option.startswith("-") else f"{option}={value}"


AS_PARSED = Spelling()  # rig's own command line


def from_environ(environ: Mapping[str, str]) -> Spelling:
    return Spelling(from_make=environ.get(ARGS_FROM, "").strip() == "make")
