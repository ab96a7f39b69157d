"""The workstation through `docker compose` (compose.yaml + compose.cpu.yaml), with real clients:
the OpenSSH client, HTTP, headless Chromium, a Jupyter terminal over its websocket."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.helpers.containers import Containers
from tests.helpers.waiting import wait_until
from tests.helpers.workstation import ENV_PROBE, RESULT_LINE, TERMINAL, Workstation, running, start, up

pytestmark = pytest.mark.image

# A value that breaks naive quoting in sshd's config and in shell exports alike.
TRICKY = 'it\'s "quoted" $HOME `id` back\\slash; #hash'


@pytest.fixture(scope="module")
def ws(image: str) -> Iterator[Workstation]:
    with tempfile.TemporaryDirectory(prefix="rig-test-") as d:
        tmp = Path(d)
        override = tmp / "override.yaml"
        override.write_text(
            "services:\n  workstation:\n    environment:\n"
            # $$: compose's own escape for a literal $.
            f"      RIG_QUOTES: {json.dumps(TRICKY.replace('$', '$$'))}\n      YOLO_OFFLINE: 'True'\n"
        )
        # Not the image's 1000: the remap of user yolo is exercised by every test below.
        ws = start("rig-test", tmp, RIG_UID="4321", RIG_GID="4322")
        ws.overrides.append(override)
        with running(ws, 20):
            yield ws


# ---- a normal start --------------------------------------------------------------------------------
@pytest.mark.stack  # the workstation starts on every stack
def test_normal_start_logs_only_info(ws: Workstation) -> None:
    # JupyterLab may answer a moment before the supervisor's next look marks it running.
    def running() -> str:
        text = ws.logs()
        return text if "INFO jupyter: running on port" in text else ""

    logs = wait_until(running, timeout=30)
    lines = [line for line in logs.splitlines() if line.strip()]
    assert any(line.startswith("INFO jupyter: running on port 8888") for line in lines), logs
    assert any(line.startswith("INFO sshd: running on port 2222") for line in lines), logs
    offenders = [line for line in lines if not line.startswith("INFO ")]
    assert offenders == [], logs


# ---- SSH ------------------------------------------------------------------------------------------
@pytest.mark.stack
def test_key_login_sees_the_container_environment(ws: Workstation) -> None:
    result = ws.ssh(
        "printenv; echo python=$(command -v python); touch /workspace/mine; stat -c %u:%g /workspace/mine"
    )
    assert result.returncode == 0, result.stderr
    env = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert env["PATH"].startswith("/opt/venv/bin:")
    assert env["python"] == "/opt/venv/bin/python"
    assert env["VIRTUAL_ENV"] == "/opt/venv"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    assert env["YOLO_OFFLINE"] == "True"
    assert env["RIG_QUOTES"] == TRICKY
    assert env["USER"] == "yolo"
    assert "SSH_CONNECTION" in env  # sshd's own session variables are not overwritten
    assert "JUPYTER_TOKEN" not in env and "SSH_PASSWORD" not in env
    assert result.stdout.splitlines()[-1] == "4321:4322"  # RIG_UID/RIG_GID


def test_login_shell_keeps_the_environment(ws: Workstation) -> None:
    # Debian's /etc/profile resets PATH; the profile.d file written at start restores it.
    result = ws.ssh("bash -lc 'command -v python; printenv RIG_QUOTES'")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["/opt/venv/bin/python", TRICKY]


def test_password_refused_when_none_is_set(ws: Workstation) -> None:
    result = ws.ssh("true", password="anything-long-enough")
    assert result.returncode == 255
    assert "Permission denied" in result.stderr


def test_root_is_refused(ws: Workstation) -> None:
    result = ws.ssh("true", user="root")
    assert result.returncode == 255
    assert "Permission denied" in result.stderr


# ---- Jupyter --------------------------------------------------------------------------------------
@pytest.mark.stack
def test_jupyter_requires_the_token(ws: Workstation) -> None:
    token = ws.token()
    assert re.fullmatch(r"[0-9a-f]{48}", token)
    assert f"/lab?token={token}" in ws.logs()  # the URL to open is printed
    assert requests.get(f"{ws.jupyter}/api/status", timeout=5).status_code == 403
    assert requests.get(f"{ws.jupyter}/api/status", params={"token": "wrong"}, timeout=5).status_code == 403
    ok = requests.get(f"{ws.jupyter}/api/status", headers={"Authorization": f"token {token}"}, timeout=5)
    assert ok.status_code == 200
    contents = requests.get(f"{ws.jupyter}/api/contents/runs", params={"token": token}, timeout=5)
    assert contents.status_code == 200  # rooted at /workspace


def _chromium(ws: Workstation, *args: str) -> subprocess.CompletedProcess[str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("needs headless Chromium")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
    flags += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]
    flags += [f"--user-data-dir={tempfile.mkdtemp(dir=ws.tmp)}", "--window-size=1280,800"]
    flags += ["--virtual-time-budget=30000"]
    return subprocess.run(
        [browser, *flags, *args, f"{ws.jupyter}/lab?token={ws.token()}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_chromium_opens_the_launcher(ws: Workstation) -> None:
    dom = _chromium(ws, "--dump-dom")
    assert "jp-Launcher" in dom.stdout, dom.stderr[-2000:]
    assert "GPU Dashboards" in dom.stdout or "nvdashboard" in dom.stdout.lower()
    shot = ws.tmp / "jupyterlab.png"
    _chromium(ws, f"--screenshot={shot}")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one
    out = os.environ.get("RIG_TEST_ARTIFACTS")
    if out:
        shutil.copy(shot, Path(out) / "jupyterlab.png")


def test_jupyter_terminal_sees_the_same_environment(ws: Workstation) -> None:
    args = ("exec", "-T", "workstation", "timeout", "40", "python", "-", ENV_PROBE, RESULT_LINE)
    result = ws.compose(*args, input=TERMINAL, check=False)
    out = result.stdout + result.stderr
    assert f"RESULT@@/opt/venv/bin/python@@all@@{TRICKY}@@yolo@@" in out, out
    owners = ws.exec(
        "ps -o uid=,gid=,args= -u yolo | grep -E 'rig[.]workstation[.](labserver|boardserver)' | grep -v grep"
    )
    ids = [line.split()[:2] for line in owners.splitlines() if line.strip()]
    assert len(ids) >= 2 and all(i == ["4321", "4322"] for i in ids), owners


# ---- supervision ------------------------------------------------------------------------------------
def test_killed_jupyter_comes_back_and_ssh_sessions_stay(ws: Workstation) -> None:
    session = subprocess.Popen(
        [*ws.ssh_argv(), "read line; echo got-$line"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: ws.ssh("pgrep -u yolo -f 'read line'").returncode == 0, timeout=15)
        before = ws.services()
        ws.exec(f"kill -KILL {before['jupyter']['pid']}")
        killed_at = time.monotonic()

        def back() -> bool:
            now = ws.services()["jupyter"]
            return bool(now["state"] == "running" and now["pid"] != before["jupyter"]["pid"])

        wait_until(back, timeout=60)
        wait_until(lambda: requests.get(f"{ws.jupyter}/api", timeout=2).status_code == 200, timeout=30)
        print(f"jupyter answered again {time.monotonic() - killed_at:.1f} s after SIGKILL")
        assert ws.services()["sshd"]["pid"] == before["sshd"]["pid"]
        out, err = session.communicate("x\n", timeout=15)
        assert session.returncode == 0, err
        assert out.strip() == "got-x"
    finally:
        if session.poll() is None:
            session.kill()
    logs = ws.logs()
    assert "WARNING jupyter: exited (killed by signal 9); restarting in 1 s" in logs


def test_healthcheck_turns_healthy(ws: Workstation) -> None:
    cid = ws.compose("ps", "-q", "workstation").stdout.strip()

    def health() -> str:
        out = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Health.Status}}", cid],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()

    wait_until(lambda: health() == "healthy", timeout=60, interval=1)
    assert ws.exec("rig health").strip() == "healthy"


# ---- persistence, stop, password login: a second workstation, up / stop / down / up ---------------
def test_host_key_survives_down_up_the_token_does_not_and_stop_is_clean(image: str, tmp_path: Path) -> None:
    # The key comes from a mounted authorized_keys file this time, not SSH_PUBLIC_KEY.
    ws = start("rig-test-persist", tmp_path, SSH_PASSWORD="correct horse battery", SSH_PUBLIC_KEY="")
    ws.env["SSH_AUTHORIZED_KEYS"] = str(ws.key.with_suffix(".pub"))
    with running(ws, 20):  # up: waits for a key login to work
        key_before, token_before = ws.host_key(), ws.token()
        assert key_before in ws.exec("cat /var/lib/rig/ssh/ssh_host_ed25519_key.pub")
        ok = ws.ssh("echo in", password="correct horse battery")
        assert ok.returncode == 0 and ok.stdout.strip() == "in", ok.stderr
        assert ws.ssh("true", password="wrong password!").returncode == 255

        cid = ws.compose("ps", "-q", "workstation").stdout.strip()
        # `down` removes the container: follow its exit code and log while it happens.
        waiter = subprocess.Popen(["docker", "wait", cid], stdout=subprocess.PIPE, text=True)
        follower = subprocess.Popen(
            ["docker", "logs", "-f", cid], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        time.sleep(0.5)  # both attached before the stop begins
        started = time.monotonic()
        stopped = ws.compose("down", check=False)  # keeps the volumes
        took = time.monotonic() - started
        exit_code = waiter.communicate(timeout=30)[0].strip()
        log_tail = follower.communicate(timeout=30)[0].rstrip().splitlines()[-3:]
        assert stopped.returncode == 0, stopped.stderr
        assert exit_code == "0", log_tail
        assert took < 20, f"down took {took:.1f} s, more than stop_grace_period"
        assert log_tail[-1] == "INFO serve: stopped", log_tail

        up(ws)
        assert ws.host_key() == key_before
        assert ws.token() != token_before  # a new one at every start (issue 26): a leaked one ends here


# ---- bad input: one line, a non-zero exit, nothing listening ---------------------------------------
@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"SSH_PUBLIC_KEY": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBroken me@laptop"},
            "SSH_PUBLIC_KEY line 1 is not a valid SSH public key",
        ),
        (
            {"SSH_PASSWORD_FILE": "/run/secrets/missing"},
            "SSH_PASSWORD_FILE=/run/secrets/missing: cannot read",
        ),
        ({"JUPYTER_TOKEN_FILE": "/etc"}, "JUPYTER_TOKEN_FILE=/etc: cannot read /etc (Is a directory)"),
        ({"SSH_PASSWORD": "short"}, "SSH_PASSWORD is shorter than 8 characters"),
        ({"JUPYTER_TOKEN": "x" * 15}, "JUPYTER_TOKEN is shorter than 16 characters, short enough to guess"),
        ({"RIG_UID": "0"}, "RIG_UID=0 would run SSH logins, Jupyter and training as root"),
    ],
)
def test_bad_input_fails_before_anything_listens(
    containers: Containers, env: dict[str, str], message: str
) -> None:
    rc, logs = containers.oneshot(None, timeout=60, environment=env)
    assert rc == 1, logs
    errors = [line for line in logs.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and message in errors[0], logs
    assert "running on port" not in logs and "Server listening" not in logs
    assert "Traceback" not in logs


def test_files_in_bind_mounts_belong_to_rig_uid(containers: Containers, tmp_path: Path) -> None:
    tmp_path.chmod(0o777)
    rc, logs = containers.oneshot(
        ["bash", "-c", "id -u; id -g; touch /mnt/made-here; printenv HOME"],
        timeout=60,
        environment={"RIG_UID": "2345", "RIG_GID": "3456"},
        volumes={str(tmp_path): {"bind": "/mnt", "mode": "rw"}},
    )
    assert rc == 0, logs
    assert logs.splitlines()[-3:] == ["2345", "3456", "/home/yolo"]
    made = (tmp_path / "made-here").stat()
    assert (made.st_uid, made.st_gid) == (2345, 3456)


def test_serve_refuses_to_start_as_another_user(containers: Containers) -> None:
    rc, logs = containers.oneshot(None, timeout=60, user="1000:1000")
    assert rc == 1
    assert "rig serve must start as root" in logs
