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
        "rigneedsnew 0.1 depends on numpy>=99 would replace the image's pinned numpy==1.26.4"
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


# pip 23.0.1's output (the image's) for `pip install ULTRALYTICS_WHEEL` and for a package that needs
# the desktop OpenCV, under the gate's constraints (userenv.SAME_MODULE).
SAME_MODULE = """\
Processing /ul/ultralytics-8.4.100-py3-none-any.whl
ERROR: Cannot install ultralytics 8.4.100 (from /ul/ultralytics-8.4.100-py3-none-any.whl) because these \
package versions have conflicting dependencies.

The conflict is caused by:
    The user requested ultralytics 8.4.100 (from /ul/ultralytics-8.4.100-py3-none-any.whl)
    The user requested (constraint) ultralytics===0+the.image.has.it.as.ultralytics-opencv-headless

To fix this you could try to:
"""
NEEDS_DESKTOP_OPENCV = """\
The conflict is caused by:
    needscv 0.1 depends on opencv-python
    The user requested (constraint) opencv-python===0+the.image.has.it.as.opencv-python-headless

"""
PINS = {"ultralytics-opencv-headless": "8.4.190", "opencv-python-headless": "4.11.0.86"}


def test_the_same_module_under_another_name_is_refused_naming_the_pin_and_the_override() -> None:
    line = pipgate.pin_conflict(SAME_MODULE, PINS)
    assert line is not None and "\n" not in line
    assert line.startswith(
        "ultralytics 8.4.100 (from /ul/ultralytics-8.4.100-py3-none-any.whl) would replace the "
        "image's pinned ultralytics-opencv-headless==8.4.190 (/opt/venv/requirements.lock.txt): "
        "ultralytics installs the same module; keep the image's, or shadow it"
    ), line
    assert "RIG_PIP_UNPINNED=1 pip install ultralytics-opencv-headless==VERSION (headless" in line
    needs = pipgate.pin_conflict(NEEDS_DESKTOP_OPENCV, PINS)
    assert needs is not None
    assert needs.startswith(
        "needscv 0.1 depends on opencv-python would replace the image's pinned "
        "opencv-python-headless==4.11.0.86"
    ), needs
    assert "keep the image's (`pip install --no-deps needscv` keeps it)" in needs
    assert "RIG_PIP_UNPINNED=1 pip install opencv-python-headless==VERSION" in needs


def test_the_same_module_names_are_constrained_only_where_their_twin_is_pinned() -> None:
    lock = "ultralytics-opencv-headless==8.4.190 \\\n    --hash=sha256:00\n"
    inv = pipgate.plan(["install", "ultralytics==8.4.100"], ENV, euid=1000, lock_text=lock, home=HOME)
    assert inv.constraints is not None
    assert "ultralytics===0+the.image.has.it.as.ultralytics-opencv-headless" in inv.constraints.splitlines()
    assert not any(line.startswith("opencv") for line in inv.constraints.splitlines())  # no OpenCV pinned
    unpinned = pipgate.plan(["install", "x"], {**ENV, "RIG_PIP_UNPINNED": "1"}, euid=1000, lock_text=lock)
    assert unpinned.constraints is None
