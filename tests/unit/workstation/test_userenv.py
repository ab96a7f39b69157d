"""User yolo's own packages: the session variables, the login profile, the pins as constraints."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from rig.observe import doctor_gather
from rig.workstation import sessionenv, userenv, users

HOME = Path("/home/yolo")
SITE = "/home/yolo/.local/lib/python3.11/site-packages"

# What `uv export --format requirements-txt` writes (the image's requirements.lock.txt), shortened.
LOCK = """\
numpy==1.26.4 \\
    --hash=sha256:0123 \\
    --hash=sha256:4567
    # via
    #   torch
nvidia-nccl-cu12==2.20.5 ; platform_machine == 'x86_64' and sys_platform == 'linux' \\
    --hash=sha256:89ab
Pillow_SIMD==10.0.0 \\
    --hash=sha256:cdef
"""


def test_constraints_keep_the_pins_and_markers_without_hashes() -> None:
    assert userenv.constraints(LOCK).splitlines() == [
        "numpy==1.26.4",
        "nvidia-nccl-cu12==2.20.5 ; platform_machine == 'x86_64' and sys_platform == 'linux'",
        "Pillow_SIMD==10.0.0",
    ]
    assert userenv.pins(LOCK) == {"numpy": "1.26.4", "nvidia-nccl-cu12": "2.20.5", "pillow-simd": "10.0.0"}


def test_a_name_that_installs_a_pinned_module_shadows_that_pin() -> None:
    lock = LOCK + "opencv-python-headless==4.11.0.86 \\\n    --hash=sha256:00\n"
    pins = userenv.pins(lock)
    assert "opencv-python" not in pins  # its constraint is not a pin
    assert userenv.constraints(lock).splitlines()[-3:] == [
        "opencv-python===0+the.image.has.it.as.opencv-python-headless",
        "opencv-contrib-python===0+the.image.has.it.as.opencv-python-headless",
        "opencv-contrib-python-headless===0+the.image.has.it.as.opencv-python-headless",
    ]
    assert userenv.pinned_as("OpenCV_Python", pins) == ("opencv-python-headless", "4.11.0.86")
    assert userenv.pinned_as("numpy", pins) == ("numpy", "1.26.4")
    assert userenv.pinned_as("ultralytics", pins) is None  # its twin is not in this lock
    assert userenv.refused_as("opencv-python", "===0+the.image.has.it.as.opencv-python-headless") == (
        "opencv-python-headless"
    )
    assert userenv.refused_as("numpy", "==1.26.4") is None


def test_session_variables_add_the_users_prefix_once() -> None:
    first = userenv.session_variables({"PATH": "/opt/venv/bin:/usr/bin"}, HOME)
    assert first == {
        "PATH": "/opt/venv/bin:/usr/bin:/home/yolo/.local/bin",
        "PYTHONPATH": f"/opt/rig/python:{SITE}",
    }
    assert userenv.session_variables(first, HOME) == first  # a nested session adds nothing
    mine = userenv.session_variables({"PATH": "/usr/bin", "PYTHONPATH": "/src"}, HOME)
    assert mine["PYTHONPATH"] == f"/opt/rig/python:{SITE}:/src"


def test_a_program_run_as_yolo_imports_its_packages() -> None:
    env = users.session_environ({"PATH": "/opt/venv/bin:/usr/bin"})
    assert env["PYTHONPATH"].split(":") == ["/opt/rig/python", SITE]
    assert env["PATH"].endswith(":/home/yolo/.local/bin")


def test_ssh_sessions_get_the_users_packages_but_the_shared_profile_does_not() -> None:
    environ = {"PATH": "/opt/venv/bin:/usr/bin", "NVIDIA_VISIBLE_DEVICES": "all"}
    assert f'"PYTHONPATH=/opt/rig/python:{SITE}"' in sessionenv.render_sshd(environ)
    assert "PYTHONPATH" not in sessionenv.render_profile(environ)  # root's login shells read it too


def _login(profile: Path, uid: int, home: Path) -> dict[str, str]:
    script = f'. {profile}; . {profile}; printf \'%s\\n\' "$PATH" "${{PYTHONPATH:-}}"'
    argv = ["bash", "-c", script]
    if uid != os.geteuid():
        argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv]
    out = subprocess.run(
        argv,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return {"PATH": out[0], "PYTHONPATH": out[1]}


def test_the_login_profile_restores_the_image_path_and_adds_the_users_packages() -> None:
    if os.geteuid() != 0:
        pytest.skip("runs the profile as root and as another user: needs root")
    readable = Path(tempfile.mkdtemp(prefix="rig-test-profile-"))  # pytest's tmp_path is root's only
    readable.chmod(0o755)
    profile = readable / "rig-session.sh"
    profile.write_text(userenv.render_profile("/opt/venv/bin:/usr/bin:/bin"))
    profile.chmod(0o644)
    user = _login(profile, 4321, Path("/home/u"))
    assert user == {
        "PATH": "/opt/venv/bin:/usr/bin:/bin:/home/u/.local/bin",
        "PYTHONPATH": "/opt/rig/python:/home/u/.local/lib/python3.11/site-packages",
    }
    root = _login(profile, 0, Path("/root"))
    assert root == {"PATH": "/opt/venv/bin:/usr/bin:/bin", "PYTHONPATH": ""}
    shutil.rmtree(readable)


def test_the_doctor_lists_what_the_user_added_by_folder_names_alone(tmp_path: Path) -> None:
    site = tmp_path / SITE.lstrip("/")
    (site / "rigdemo-0.1.dist-info").mkdir(parents=True)
    (site / "numpy-2.0.0.dist-info").mkdir()
    (site / "rigdemo").mkdir()
    lock = tmp_path / "opt/venv/requirements.lock.txt"
    lock.parent.mkdir(parents=True)
    lock.write_text(LOCK)
    facts = doctor_gather.user_packages(tmp_path)
    assert facts["user_packages"] == (("numpy", "2.0.0", "1.26.4"), ("rigdemo", "0.1", None))
    assert facts["user_site"] == SITE
