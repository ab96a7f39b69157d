"""rig's pip gate: where an install goes, under which pins, and the one line for a pinned package."""

from __future__ import annotations

from pathlib import Path

import pytest
from rig.errors import RigError
from rig.workstation import pipgate

HOME = Path("/home/yolo")
LOCK = "numpy==1.26.4 \\\n    --hash=sha256:0123\n"
ENV = {
    "PATH": "/opt/venv/bin:/usr/bin",
    "PYTHONPATH": "/opt/rig/python:/home/yolo/.local/lib/python3.11/site-packages",
}


def plan(*args: str, **env: str) -> pipgate.Invocation:
    return pipgate.plan(args, {**ENV, **env}, euid=1000, lock_text=LOCK, home=HOME, python="/py")


def test_install_goes_to_the_users_prefix_within_the_pins() -> None:
    inv = plan("install", "--user", "rigdemo")
    runner = ("/py", "-m", "rig.workstation.piprun", "/home/yolo/.local", "/opt/rig/pip")
    assert inv.argv == (*runner, "install", "--prefix", "/home/yolo/.local", "rigdemo")
    assert inv.constraints == "numpy==1.26.4\n"
    # pip runs the real pip, which the gate's own `pip` package must not shadow.
    assert inv.env["PYTHONPATH"] == "/home/yolo/.local/lib/python3.11/site-packages"
    assert inv.env["PIP_DISABLE_PIP_VERSION_CHECK"] == "1"


def test_an_explicit_target_is_kept_and_other_commands_pass_through() -> None:
    assert plan("-q", "install", "--target=/tmp/x", "a").argv[5:] == ("-q", "install", "--target=/tmp/x", "a")
    listed = plan("list")
    assert listed.argv[5:] == ("list",) and listed.constraints is None


def test_unpinned_is_the_users_say_so() -> None:
    inv = plan("install", "numpy==2.0.0", RIG_PIP_UNPINNED="1")
    assert inv.constraints is None
    assert inv.argv[5:] == ("install", "--prefix", "/home/yolo/.local", "numpy==2.0.0")


def test_root_is_refused_in_one_line() -> None:
    with pytest.raises(RigError, match=r"runs as yolo"):
        pipgate.plan(["install", "x"], ENV, euid=0, lock_text=LOCK)


# pip 23.0.1's output for a wheel that needs numpy>=99 (the image test's), stdout and stderr as one.
CONFLICT = """\
Processing /wh/rigneedsnew-0.1-py3-none-any.whl

The conflict is caused by:
    rigneedsnew 0.1 depends on numpy>=99
    The user requested (constraint) numpy==1.26.4

To fix this you could try to:
1. loosen the range of package versions you've specified
2. remove package versions to allow pip attempt to solve the dependency conflict

ERROR: Cannot install rigneedsnew==0.1 because these package versions have conflicting dependencies.
ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/
"""


def test_a_pinned_conflict_becomes_one_line_naming_the_pin() -> None:
    line = pipgate.pin_conflict(CONFLICT)
    assert line is not None and "\n" not in line
    assert line.startswith(
        "pip: rigneedsnew 0.1 depends on numpy>=99 would replace the image's pinned numpy==1.26.4"
    )
    assert "RIG_PIP_UNPINNED=1 pip install" in line
    assert pipgate.pin_conflict("ERROR: No matching distribution found for nothing-here\n") is None


def test_output_passes_through_until_pip_explains_a_failure() -> None:
    holder = pipgate.Holder()
    data = CONFLICT.encode()
    # In small pieces, as a pty delivers them; a progress bar's \r-line passes at once.
    shown = b"".join(holder.feed(data[i : i + 7]) for i in range(0, len(data), 7))
    assert shown == b"Processing /wh/rigneedsnew-0.1-py3-none-any.whl\n\n"
    assert holder.rest().decode().startswith("The conflict is caused by:")
    bar = pipgate.Holder()
    assert bar.feed(b"Downloading x (1 MB) 10%\r") == b"Downloading x (1 MB) 10%\r"
    assert bar.feed(b"Downloading x (1 MB) 100%\n") == b"Downloading x (1 MB) 100%\n"
    assert bar.feed(b"Th") == b""  # a new line that could still become a trigger
    assert bar.feed(b"at is all\n") == b"That is all\n"
