"""The box a user lives in: login shells with the image's environment, `pip install` that persists
in the user's own prefix, and the home folder on its volume, through the real clients (OpenSSH,
`docker compose exec` as `make shell` runs it, a Jupyter kernel and terminal)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from rig.yolo import contract

from tests.helpers.containers import Containers, free_port
from tests.helpers.lock import locked_versions
from tests.helpers.waiting import wait_until
from tests.helpers.wheels import make_wheel
from tests.helpers.workstation import KERNEL_CELL, TERMINAL, Workstation, running, start, up
from tools import ultralytics_releases

pytestmark = pytest.mark.image

SITE = "/home/yolo/.local/lib/python3.11/site-packages"
IMAGE_SITE = "/opt/venv/lib/python3.11/site-packages"
SETTINGS = "/workspace/.config/Ultralytics/settings.json"
# What a shell reports: python, rig, GPU variables, the user's import path, who.
PROBE = (
    'echo "R""ESULT@@$(command -v python)@@$(command -v rig)@@${CUDA_DEVICE_ORDER:-}@@'
    '${NVIDIA_VISIBLE_DEVICES:-}@@${PYTHONPATH:-}@@$(id -un)@@"'
)
YOLO_ENV = f"RESULT@@/opt/venv/bin/python@@/opt/venv/bin/rig@@PCI_BUS_ID@@all@@/opt/rig/python:{SITE}@@yolo@@"


def _result(out: str) -> str:
    return next(line.strip() for line in out.splitlines() if line.startswith("RESULT@@"))


# ---- `docker run IMAGE bash -l` and `make shell` without a workstation -----------------------------
@pytest.mark.stack
def test_docker_run_login_shell_has_the_image_environment(containers: Containers) -> None:
    rc, out = containers.oneshot(["bash", "-lc", PROBE + "; command -v rig yolo pip"], timeout=60)
    assert rc == 0, out
    assert _result(out) == YOLO_ENV
    assert out.splitlines()[-3:] == ["/opt/venv/bin/rig", "/opt/venv/bin/yolo", "/usr/local/bin/pip"]


def test_roots_login_shell_has_the_venv_but_not_the_users_packages(containers: Containers) -> None:
    rc, out = containers.oneshot(["bash", "-lc", PROBE], timeout=60, environment={"RIG_USER": "root"})
    assert rc == 0, out
    assert _result(out) == "RESULT@@/opt/venv/bin/python@@/opt/venv/bin/rig@@PCI_BUS_ID@@all@@@@root@@"


def test_pip_as_root_is_refused_in_one_line(containers: Containers) -> None:
    rc, out = containers.oneshot(["pip", "install", "anything"], timeout=60, environment={"RIG_USER": "root"})
    assert rc == 1, out
    assert out.strip().splitlines() == [
        next(line for line in out.splitlines() if line.startswith("ERROR pip: installs into user yolo's"))
    ]


# ---- the workstation ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ws(image: str) -> Iterator[Workstation]:
    with tempfile.TemporaryDirectory(prefix="userbox-test-") as d:
        tmp = Path(d)
        wheels = tmp / "wheels"
        wheels.mkdir()
        for name, requires in (("rigdemo", ()), ("rignotebook", ()), ("rigneedsnew", ("numpy>=99",))):
            make_wheel(wheels, name, requires=requires)
        ws = start("userbox-test", tmp, RIG_UID="4321", RIG_GID="4322")
        with running(ws, 20):
            ws.compose("cp", str(wheels), "workstation:/tmp/wheels")
            ws.exec("chmod -R a+rX /tmp/wheels")
            yield ws


def kernel(ws: Workstation, code: str) -> str:
    args = ("exec", "-T", "workstation", "timeout", "90", "python", "-", code, "end")
    result = ws.compose(*args, input=KERNEL_CELL, check=False, timeout=120)
    return result.stdout + result.stderr


def test_every_login_shell_has_the_image_environment(ws: Workstation) -> None:
    # `make shell` with the workstation running: `docker compose exec -u yolo workstation bash -l`.
    shell = ws.compose("exec", "-T", "-u", "yolo", "workstation", "bash", "-lc", PROBE)
    assert _result(shell.stdout) == YOLO_ENV
    ssh_login = ws.ssh(f"bash -lc '{PROBE}'")
    assert _result(ssh_login.stdout) == YOLO_ENV, ssh_login.stderr
    ssh_command = ws.ssh(PROBE)  # `ssh host cmd`: no login shell, sshd's SetEnv alone
    assert _result(ssh_command.stdout) == YOLO_ENV, ssh_command.stderr
    args = ("exec", "-T", "workstation", "timeout", "40", "python", "-", PROBE, r"RESULT@@.*@@\r?\n")
    terminal = ws.compose(*args, input=TERMINAL, check=False)
    assert YOLO_ENV in terminal.stdout, terminal.stdout + terminal.stderr


def test_pip_install_lands_in_the_users_prefix_for_new_sessions_and_kernels(ws: Workstation) -> None:
    installed = ws.ssh("pip install --no-index /tmp/wheels/rigdemo-0.1-py3-none-any.whl", timeout=120)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "Successfully installed rigdemo-0.1" in installed.stdout
    again = ws.ssh("python -c 'import rigdemo; print(rigdemo.VALUE, rigdemo.__file__)'")
    assert again.stdout.strip() == f"rigdemo 0.1 {SITE}/rigdemo/__init__.py", again.stderr
    # The cell's reply says ok or error; a kernel's printed output may arrive after it, so it asserts.
    cell = kernel(
        ws, f"import rigdemo; assert rigdemo.__file__ == '{SITE}/rigdemo/__init__.py', rigdemo.__file__"
    )
    assert "REPLY ok" in cell, cell
    # `%pip install` in a notebook, then the import in that same kernel.
    cell = kernel(
        ws,
        "%pip install --no-index /tmp/wheels/rignotebook-0.1-py3-none-any.whl\n"
        "import rignotebook; assert rignotebook.VALUE == 'rignotebook 0.1'",
    )
    assert "REPLY ok" in cell, cell
    doctor = ws.ssh("rig doctor | grep 'user packages'", timeout=120)
    assert "2 added by you in" in doctor.stdout and "rigdemo 0.1" in doctor.stdout, doctor.stderr


def test_roots_python_never_sees_the_users_packages(ws: Workstation) -> None:
    ws.ssh("pip install --no-index /tmp/wheels/rigdemo-0.1-py3-none-any.whl", timeout=120)
    # root's `docker compose exec`, plain and as a login shell: neither imports from ~/.local.
    for argv in (["python", "-c", "import rigdemo"], ["bash", "-lc", "python -c 'import rigdemo'"]):
        result = ws.compose("exec", "-T", "workstation", *argv, check=False)
        assert result.returncode == 1 and "No module named 'rigdemo'" in result.stderr, result.stderr
    supervisor = ws.exec(
        "tr '\\0' '\\n' </proc/1/environ; tr '\\0' '\\n' </proc/$(pgrep -o -f 'rig serve')/environ"
    )
    assert "PYTHONPATH" not in supervisor


def test_a_package_that_would_replace_a_pin_is_refused_in_one_line(ws: Workstation) -> None:
    result = ws.ssh("pip install --no-index --find-links /tmp/wheels rigneedsnew", timeout=120)
    assert result.returncode == 1
    out = (result.stdout + result.stderr).strip().splitlines()
    errors = [line for line in out if line.startswith("ERROR")]
    assert len(errors) == 1, out
    assert errors[0].startswith(
        "ERROR pip: rigneedsnew 0.1 depends on numpy>=99 would replace the image's pinned numpy=="
    ), out
    assert "RIG_PIP_UNPINNED=1" in errors[0]
    assert not any("conflict is caused" in line for line in out), out
    assert "rigneedsnew" not in ws.ssh("pip list").stdout


def test_the_user_may_shadow_a_pin_and_the_doctor_says_so(ws: Workstation) -> None:
    ws.compose("cp", str(make_wheel(ws.tmp, "numpy", "99.0")), "workstation:/tmp/wheels/")
    ws.exec("chmod a+r /tmp/wheels/numpy-99.0-py3-none-any.whl")
    wheel = "/tmp/wheels/numpy-99.0-py3-none-any.whl"
    refused = ws.ssh(f"pip install --no-index {wheel}", timeout=120)
    assert refused.returncode == 1 and "would replace the image's pinned numpy==" in refused.stderr
    try:
        forced = ws.ssh(f"RIG_PIP_UNPINNED=1 pip install --no-index {wheel}", timeout=120)
        assert forced.returncode == 0, forced.stdout + forced.stderr
        assert ws.ssh("python -c 'import numpy; print(numpy.VALUE)'").stdout.strip() == "numpy 99.0"
        # root's doctor (no user packages on its path) reads the user's folder names and warns.
        root_numpy = ws.exec("python -c 'import numpy; print(numpy.__version__)'").strip()
        doctor = ws.compose("exec", "-T", "workstation", "rig", "doctor", check=False, timeout=120).stdout
        assert f"numpy 99.0 over the image's {root_numpy}" in doctor, doctor
    finally:
        ws.ssh("pip uninstall -y numpy", timeout=120)
    assert ws.ssh("python -c 'import numpy; print(numpy.__version__)'").stdout.strip() == root_numpy


# ---- another Ultralytics: refused by the gate, shadowed on request, the user's settings kept -----------
OTHER = "8.4.100"  # settings schema 0.0.6, which resets a file of the image's schema (0.0.8)
SEEN = (
    "python -c 'import os, ultralytics as u; from ultralytics.utils import SETTINGS as s; "
    'print("SEEN", u.__version__, u.__file__, os.environ["YOLO_CONFIG_DIR"], s["runs_dir"])\''
)


def test_another_ultralytics_is_refused_then_shadowed_and_the_users_settings_survive(ws: Workstation) -> None:
    pinned = locked_versions("cu121")["ULTRALYTICS_VERSION"]  # every stack locks the same Ultralytics
    wheels = ws.tmp / "ul"
    wheels.mkdir()
    for dist in ("ultralytics", "ultralytics-opencv-headless"):
        shutil.copy(ultralytics_releases.wheel(OTHER, dist), wheels)
    make_wheel(wheels, "opencv_python", "4.10.0.84")
    ws.compose("cp", str(wheels), "workstation:/tmp/ul")
    ws.exec("chmod -R a+rX /tmp/ul")
    changed = ws.ssh(
        f"yolo settings runs_dir=/workspace/mine >/dev/null && sha256sum {SETTINGS}", timeout=120
    )
    assert changed.returncode == 0, changed.stdout + changed.stderr
    mine = changed.stdout.split()[0]

    # The same module under another name, from a wheel, the index's name, or the desktop OpenCV.
    for command, twin in (
        (
            f"pip install --no-index /tmp/ul/ultralytics-{OTHER}-py3-none-any.whl",
            "ultralytics-opencv-headless",
        ),
        (f"pip install --no-index --find-links /tmp/ul ultralytics=={OTHER}", "ultralytics-opencv-headless"),
        ("pip install --no-index --find-links /tmp/ul opencv-python", "opencv-python-headless"),
    ):
        refused = ws.ssh(command, timeout=120)
        out = (refused.stdout + refused.stderr).strip().splitlines()
        errors = [line for line in out if line.startswith("ERROR")]
        assert refused.returncode == 1 and len(errors) == 1, out
        assert f"would replace the image's pinned {twin}==" in errors[0], errors
        assert f"RIG_PIP_UNPINNED=1 pip install {twin}==VERSION" in errors[0], errors  # the headless twin
    assert "ultralytics" not in ws.ssh(f"ls {SITE}").stdout

    # With the override: the headless one, the image's other packages serve it (no index needed).
    headless = f"ultralytics-opencv-headless=={OTHER}"
    forced = ws.ssh(f"RIG_PIP_UNPINNED=1 pip install --no-index --find-links /tmp/ul {headless}", timeout=180)
    assert forced.returncode == 0, forced.stdout + forced.stderr
    try:
        # python, then `yolo settings`: that Ultralytics reads a file of its schema, seeded from the user's.
        used = ws.ssh(f"{SEEN} && yolo settings && sha256sum {SETTINGS}", timeout=180)
        out = used.stdout + used.stderr
        assert used.returncode == 0, out
        theirs = "/workspace/.config/Ultralytics-schema-0.0.6"
        assert f"SEEN {OTHER} {SITE}/ultralytics/__init__.py {theirs} /workspace/mine" in out, out
        said = [line for line in out.splitlines() if line.startswith("INFO settings:")]
        assert (
            len(said) == 1
            and f"Ultralytics {OTHER} ({SITE}/ultralytics) reads settings schema 0.0.6" in said[0]
        )
        assert f"{theirs}/Ultralytics/settings.json" in out and '"runs_dir": "/workspace/mine"' in out, out
        assert "settings reset" not in out and "WARNING" not in out, out
        assert f"{mine}  {SETTINGS}" in out, out  # the user's file, byte for byte
        # A notebook's kernel imports it too, with the same settings.
        cell = kernel(
            ws,
            f"import ultralytics; assert ultralytics.__version__ == '{OTHER}', ultralytics.__file__\n"
            "from ultralytics.utils import SETTINGS as s; assert s['runs_dir'] == '/workspace/mine', s",
        )
        assert "REPLY ok" in cell, cell
        # rig names it, where it comes from and the image's it shadows.
        version = ws.ssh("rig --version", timeout=60).stdout
        assert f", ultralytics {OTHER}, " in version, version
        assert version.rstrip().endswith(
            f"(ultralytics from {SITE}/ultralytics, not the image's {pinned} from {IMAGE_SITE}/ultralytics)"
        ), version
        doctor = ws.ssh("rig doctor --json", timeout=180).stdout
        checks = {c["name"]: c for c in json.loads(doctor[doctor.index("{") :])["checks"]}
        ultralytics = checks["ultralytics"]
        assert ultralytics["status"] == "warn", ultralytics
        assert (
            f"import ultralytics {OTHER} ({SITE}/ultralytics, ultralytics-opencv-headless)"
            in ultralytics["detail"]
        )
        assert f"not the image's ultralytics {pinned} ({IMAGE_SITE}/ultralytics" in ultralytics["detail"]
        assert (
            f"ultralytics_opencv_headless {OTHER} over the image's {pinned}"
            in checks["user packages"]["detail"]
        )
        # rig train checks the Ultralytics its ranks import (the user's), before any data is read.
        trained = ws.ssh("rig train device=cpu data=/nowhere/data.yaml epochs=1", timeout=120)
        lines = (trained.stdout + trained.stderr).strip().splitlines()
        window = f"rig is tested with Ultralytics {contract.WINDOW.oldest} to {pinned}"
        assert trained.returncode == 2 and len(lines) == 1 and "Traceback" not in lines[0], lines
        assert (
            lines[0].startswith(
                f"ERROR rig: rig train: Ultralytics {OTHER} (imported from {SITE}/ultralytics) is older than"
            )
            and window in lines[0]
        ), lines
    finally:
        ws.ssh("pip uninstall -y ultralytics-opencv-headless", timeout=120)
    # The image's Ultralytics again, with the user's settings as they were.
    back = ws.ssh(f"{SEEN} && sha256sum {SETTINGS}", timeout=180)
    out = back.stdout + back.stderr
    assert f"SEEN {pinned} {IMAGE_SITE}/ultralytics/__init__.py /workspace/.config /workspace/mine" in out, (
        out
    )
    assert f"{mine}  {SETTINGS}" in out and "WARNING" not in out, out


# ---- VS Code Remote-SSH: it forwards TCP to a server it starts as yolo on the container's loopback ---
def test_ssh_local_forwarding_reaches_a_server_on_the_containers_loopback(ws: Workstation) -> None:
    inside, local = 47123, free_port()
    server = subprocess.Popen(
        [
            *ws.ssh_argv(),
            "cd ~ && echo vscode-server-here > probe.txt && exec timeout 120 "
            f"python -m http.server {inside} --bind 127.0.0.1",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    tunnel = subprocess.Popen(
        [
            *ws.ssh_argv()[:-1],
            "-N",
            "-o",
            "ExitOnForwardFailure=yes",
            "-L",
            f"{local}:127.0.0.1:{inside}",
            ws.ssh_argv()[-1],
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        body = wait_until(
            lambda: requests.get(f"http://127.0.0.1:{local}/probe.txt", timeout=5).text, timeout=60
        )
        assert body.strip() == "vscode-server-here"
    finally:  # the host's ssh clients; one slow to leave on a loaded box is killed, not waited on
        for proc in (tunnel, server):
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)


# ---- the home folder: kept across down/up, never followed by root, authorized_keys ignored ----------
def test_home_and_packages_survive_down_up_and_an_id_change(ws: Workstation) -> None:
    ws.ssh("pip install --no-index /tmp/wheels/rigdemo-0.1-py3-none-any.whl", timeout=120)
    other = ws.tmp / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    key = other.with_suffix(".pub").read_text().strip()
    setup = ws.ssh(
        "echo kept > ~/notes.txt && mkdir -p ~/.vscode-server/bin && echo 1 > ~/.vscode-server/bin/marker"
        " && ln -s /etc/shadow ~/shadow-link && ln -s /etc ~/etc-link"
        f" && mkdir -p ~/.ssh && echo '{key}' >> ~/.ssh/authorized_keys"
    )
    assert setup.returncode == 0, setup.stderr
    shadow_before = ws.exec("stat -c %u:%g:%a /etc/shadow /etc/passwd")

    assert ws.compose("down", "-t", "20").returncode == 0  # keeps the volumes
    ws.env.update(RIG_UID="4400", RIG_GID="4401")  # and yolo's ids change: root re-owns the volume
    up(ws)

    assert ws.ssh("cat ~/notes.txt ~/.vscode-server/bin/marker").stdout.split() == ["kept", "1"]
    assert ws.ssh("python -c 'import rigdemo; print(rigdemo.VALUE)'").stdout.strip() == "rigdemo 0.1"
    owners = ws.ssh(f"stat -c %u:%g ~/notes.txt {SITE}/rigdemo/__init__.py ~/.bashrc").stdout.split()
    assert owners == ["4400:4401"] * 3
    # The re-owning walked past the links: what they point to is root's as before.
    assert ws.exec("stat -c %u:%g:%a /etc/shadow /etc/passwd") == shadow_before
    # A key added from inside a session is no key: only configuration grants logins.
    argv = [
        "ssh",
        "-p",
        str(ws.ssh_port),
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
    ]
    argv += ["-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none", "-i", str(other)]
    refused = subprocess.run(
        [*argv, "yolo@127.0.0.1", "true"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert refused.returncode == 255 and "Permission denied" in refused.stderr
