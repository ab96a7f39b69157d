"""`pip` in user yolo's sessions: the image's pip, installing into ~/.local within the image's pins.

`pip` and `pip3` (/usr/local/bin) and `python -m pip` in a session (the session's PYTHONPATH puts
the gate's `pip` package first, so a notebook's `%pip install` comes here too) run `main`. `plan`
decides the real pip's command line and environment, a pure function: `install` goes to the
user's prefix (rig.workstation.userenv; `--user` means it too), constrained by the image's lock
unless RIG_PIP_UNPINNED=1, and pip manages that prefix alone (rig.workstation.piprun). A package
that installs a pinned module under another name (plain `ultralytics`, `opencv-python`) is held
off by a constraint no release meets (userenv.SAME_MODULE). pip's multi-line resolution error about
a pinned package becomes one line naming the pin; every other
message passes through as pip wrote it (on stdout: pip prints part of an error there, the rest on
stderr, so the gate reads both as one stream).
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rig import paths, program
from rig.errors import RigError
from rig.workstation import userenv

# pip's subcommands: the first of these in argv is the one pip runs.
COMMANDS = frozenset(
    {"install", "download", "uninstall", "freeze", "inspect", "list", "show", "check", "config"}
    | {"search", "cache", "index", "wheel", "hash", "completion", "debug", "help"}
)
_TARGETS = ("--prefix", "--target", "-t", "--root")
_PINNED = re.compile(r"The user requested \(constraint\) ([A-Za-z0-9._-]+)(==\S+)")


@dataclass(frozen=True)
class Invocation:
    argv: tuple[str, ...]
    env: dict[str, str]
    constraints: str | None  # the constraints file's text; None: unconstrained


def subcommand(args: Sequence[str]) -> str | None:
    return next((a for a in args if a in COMMANDS), None)


def _given(args: Sequence[str], options: Sequence[str]) -> bool:
    return any(a == o or a.startswith(o + "=") for a in args for o in options)


def plan(
    args: Sequence[str],
    environ: Mapping[str, str],
    *,
    euid: int,
    lock_text: str,
    home: Path = paths.HOME,
    python: str = sys.executable,
) -> Invocation:
    if euid == 0:
        raise RigError(
            "installs into user yolo's own packages (~/.local on the `home` volume) and runs as yolo: "
            "use an SSH session, a Jupyter terminal or `make shell`; the image's /opt/venv stays read-only "
            "(packages for a whole team: a derived image, docs/user-environment.md)"
        )
    args = list(args)
    env = dict(environ)
    env["PYTHONPATH"] = userenv.joined(str(userenv.site_packages(home)), environ.get("PYTHONPATH"))
    env["PYTHONPATH"] = ":".join(p for p in env["PYTHONPATH"].split(":") if p != str(userenv.GATE))
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    constraints = None
    if subcommand(args) == "install":
        args = [a for a in args if a != "--user"]
        at = args.index("install") + 1
        extra: list[str] = []
        if not _given(args, _TARGETS):
            extra += ["--prefix", str(userenv.prefix(home))]
        if environ.get(userenv.UNPINNED, "").strip() in ("", "0"):
            constraints = userenv.constraints(lock_text)
        args[at:at] = extra
    runner = (python, "-m", "rig.workstation.piprun", str(userenv.prefix(home)), str(userenv.PIP))
    return Invocation((*runner, *args), env, constraints)


def pin_conflict(stderr: str, pins: Mapping[str, str] | None = None) -> str | None:
    """One line for pip's "conflicting dependencies" error when a pin of the image is the cause (the gate
    prints it after `ERROR pip: `); pins (userenv.pins) name the pin that a SAME_MODULE name's
    constraint keeps."""
    pinned = _PINNED.findall(stderr)
    if not pinned:
        return None
    causes: list[str] = []
    lines = stderr.splitlines()
    if "The conflict is caused by:" in lines:
        for line in lines[lines.index("The conflict is caused by:") + 1 :]:
            if not line.strip():
                break
            if "(constraint)" not in line:
                causes.append(line.strip().removeprefix("The user requested ").strip())
    name, spec = pinned[0]
    wanted = " and ".join(causes) or "this install"
    twin = userenv.refused_as(name, spec)
    if twin is None:
        return (
            f"{wanted} would replace the image's pinned {name}{spec} ({userenv.LOCK}); keep the pin "
            f"(choose a version that fits it), or shadow it in your sessions only: "
            f"{userenv.UNPINNED}=1 pip install ... (torch and ultralytics were tested with the pin)"
        )
    version = (pins or {}).get(twin, "")
    alias = userenv.normalize(name)
    needing = [c.split(" ")[0] for c in causes if " depends on " in c]
    keep = f" (`pip install --no-deps {' '.join(needing)}` keeps it)" if needing else ""
    instead = userenv.HEADLESS.get(alias)
    shadow = f"{instead}==VERSION (headless: the desktop OpenCV cannot load here; " if instead else "... ("
    return (
        f"{wanted} would replace the image's pinned {twin}{'==' + version if version else ''} "
        f"({userenv.LOCK}): {alias} installs the same module; keep the image's{keep}, or shadow it in "
        f"your sessions only: {userenv.UNPINNED}=1 pip install {shadow}torch and ultralytics were tested "
        "with the pin)"
    )


# Where pip starts to explain a failure: from here on, its output is held back until pip exits.
_TRIGGERS = (b"The conflict is caused by:", b"ERROR:")


class Holder:
    """Passes pip's output through as it comes (progress bars included) until a line begins with one
    of _TRIGGERS; from there on it holds everything, for `pin_conflict` to read at the end."""

    def __init__(self) -> None:
        self.held = bytearray()
        self._pending = b""  # the start of a line that may still become a trigger
        self._line_open = False  # part of the current line is already passed through

    def rest(self) -> bytes:
        """What was held back, at the end."""
        return bytes(self.held) + self._pending

    def feed(self, data: bytes) -> bytes:
        if self.held:
            self.held += data
            return b""
        out = bytearray()
        data = self._pending + data
        self._pending = b""
        while data:
            head, newline, rest = data.partition(b"\n")
            if not self._line_open and head.startswith(_TRIGGERS):
                self.held += data
                return bytes(out)
            if not newline and not self._line_open and any(t.startswith(head) for t in _TRIGGERS):
                self._pending = head  # too short yet to tell
                return bytes(out)
            out += head + newline
            self._line_open = not newline
            data = rest
        return bytes(out)


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # EIO: a pty whose other end has closed
        return b""


def _run(invocation: Invocation) -> tuple[int, str]:
    """Run pip, its output passed through a Holder; in a terminal pip gets one (a pty), so it still
    draws its progress bars."""
    with tempfile.TemporaryDirectory(prefix="rig-pip-") as tmp:
        env = dict(invocation.env)
        if invocation.constraints is not None:
            path = Path(tmp) / "image-pins.txt"
            path.write_text(invocation.constraints)
            env["PIP_CONSTRAINT"] = str(path)
        holder = Holder()
        leader = -1
        if sys.stdout.isatty():
            leader, follower = pty.openpty()
            proc = subprocess.Popen(invocation.argv, env=env, stdout=follower, stderr=follower)
            os.close(follower)
            source = leader
        else:
            proc = subprocess.Popen(
                invocation.argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
            assert proc.stdout is not None
            source = proc.stdout.fileno()
        try:
            while chunk := _read(source):
                sys.stdout.buffer.write(holder.feed(chunk))
                sys.stdout.buffer.flush()
            code = proc.wait()
        finally:
            if leader >= 0:
                os.close(leader)
        return code, holder.rest().decode(errors="replace")


@program.entry("pip")
def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    lock_text = userenv.LOCK.read_text()
    invocation = plan(args, os.environ, euid=os.geteuid(), lock_text=lock_text)
    code, held = _run(invocation)
    line = pin_conflict(held, userenv.pins(lock_text)) if code != 0 else None
    if line is not None:
        raise RigError(line)
    sys.stdout.write(held)
    return code  # pip's own


if __name__ == "__main__":
    sys.exit(main())
