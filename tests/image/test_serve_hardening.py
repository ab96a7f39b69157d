"""The workstation tried as a hostile `yolo` would: an SSH login and the right to restart the
container. Real clients (OpenSSH, HTTP, Jupyter's kernel and terminal websockets), real restarts."""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.helpers import SCRIPTS, workstation
from tests.helpers.containers import Containers, free_port
from tests.helpers.waiting import wait_until
from tests.helpers.workstation import Workstation, as_yolo, restart, running, start, up

pytestmark = pytest.mark.image

# The one root-only secret a hostile link points at: mounted like a compose secret.
SECRET_TEXT = "AKIA-cloud-key-of-the-admin"
TOKEN = "a-jupyter-token-we-set-0123"  # 27 characters
PASSWORD = "correct horse battery"

# Where yolo may write, outside its volumes: data places root never executes from. Anything else
# writable by yolo (a file in /opt/venv, a directory on root's PATH) would be a way to root.
WRITABLE_BY_DESIGN = (
    "/tmp",
    "/var/tmp",
    "/dev/shm",
    "/dev/mqueue",
    "/home/yolo",
    "/workspace",
    "/datasets",
    "/weights",
    "/cache",
    "/run/lock",
    # screen's socket directory, sticky like /tmp (Debian's screen package makes it so).
    "/run/screen",
    "/var/lock",
    # Ultralytics' own DDP launcher writes its temporary scripts here as the user who trains.
    "/opt/rig/ultralytics/Ultralytics",
    # compose mounts /dev/null here when no authorized_keys file is given (find sees the mount
    # point's own type, a file, not the device).
    "/run/secrets/authorized_keys",
    # and here when no CA_BUNDLE is given.
    "/run/secrets/ca-bundle.pem",
    # JupyterLab's runtime folder (its kernels' connection files): yolo's, made afresh by root at
    # every start without following what is in it (planted links below).
    "/run/rig/jupyter",
)


@pytest.fixture(scope="module")
def hws(image: str) -> Iterator[Workstation]:
    """A workstation with a password, a token we set, and a root-only secret mounted."""
    with tempfile.TemporaryDirectory(prefix="rig-hard-") as d:
        tmp = Path(d)
        secret = tmp / "cloud_key"
        secret.write_text(SECRET_TEXT)
        secret.chmod(0o600)
        override = tmp / "override.yaml"
        # seccomp unconfined: a session may also take another process's descriptors (pidfd_getfd),
        # which Docker's default profile refuses (the token probe below).
        override.write_text(
            f"services:\n  workstation:\n    volumes:\n      - {secret}:/run/secrets/cloud_key:ro\n"
            "    security_opt:\n      - seccomp:unconfined\n"
        )
        ws = start(
            "rig-hard", tmp, RIG_UID="4321", RIG_GID="4322", SSH_PASSWORD=PASSWORD, JUPYTER_TOKEN=TOKEN
        )
        ws.overrides.append(override)
        with running(ws):
            yield ws


def warnings_in(log: str) -> list[str]:
    return [line for line in log.splitlines() if line.startswith(("WARNING", "ERROR"))]


def owners(ws: Workstation, *paths: str) -> list[str]:
    return ws.exec("stat -c '%n %u:%g %a' " + " ".join(paths)).splitlines()


def writable_by_yolo(ws: Workstation) -> list[str]:
    prune = " -o ".join(f"-path {p}" for p in ("/proc", "/sys", "/dev/pts"))
    find = f"find / -xdev \\( {prune} \\) -prune -o -writable ! -type c ! -type l -print 2>/dev/null; true"
    out = as_yolo(ws, find, timeout=120)
    allowed = WRITABLE_BY_DESIGN
    return [p for p in out.splitlines() if p and not any(p == a or p.startswith(a + "/") for a in allowed)]


# ---- 1: no path from yolo to root --------------------------------------------------------------------
def test_links_planted_where_root_acts_are_never_followed(hws: Workstation) -> None:
    targets = ("/opt/venv/bin", "/opt/venv/bin/rig", "/usr/local/bin", "/run/secrets/cloud_key", "/etc")
    before = owners(hws, *targets)
    # Every path root used to touch at start, each replaced by a link to something root executes
    # or reads (the healthcheck runs every 10 s: `rig health` from /opt/venv).
    as_yolo(
        hws,
        "set -e; cd /workspace; rm -rf runs notebooks; ln -s /opt/venv/bin runs; mkdir notebooks; "
        "ln -s /opt/venv/bin/rig notebooks/quickstart.ipynb; "
        "ln -s /run/secrets/cloud_key notebooks/.rig-seeded.json; "
        "ln -s /opt/venv/bin /run/rig/jupyter/bin; ln -s /etc /run/rig/jupyter/etc",
    )
    log = restart(hws)
    assert owners(hws, *targets) == before
    assert SECRET_TEXT not in as_yolo(hws, "cat /workspace/notebooks/* /workspace/notebooks/.??* 2>&1; true")
    warned = warnings_in(log)
    assert any("skipped /workspace/runs: it is a symbolic link" in w for w in warned), log
    assert any("skipped /workspace/notebooks/.rig-seeded.json: it is a symbolic link" in w for w in warned), (
        log
    )
    assert writable_by_yolo(hws) == []

    # The folder itself a link to a root-owned one: nothing is created or re-owned in it.
    as_yolo(hws, "cd /workspace; rm -rf notebooks runs; mkdir runs; ln -s /usr/local/lib/rig notebooks")
    lib_before = owners(hws, "/usr/local/lib/rig")
    log = restart(hws)
    assert owners(hws, *targets, "/usr/local/lib/rig") == [*before, *lib_before]
    assert ws_listing(hws, "/usr/local/lib/rig") == ["apt-install.sh"]
    assert any("skipped /workspace/notebooks: it is a symbolic link" in w for w in warnings_in(log)), log
    assert writable_by_yolo(hws) == []


def ws_listing(ws: Workstation, path: str) -> list[str]:
    return sorted(ws.exec(f"ls -A {path}").split())


def test_healthcheck_runs_unprivileged(hws: Workstation) -> None:
    cid = hws.compose("ps", "-q", "workstation").stdout.strip()
    spec = json.loads(
        subprocess.run(
            ["docker", "inspect", "-f", "{{json .Config.Healthcheck.Test}}", cid],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert spec[:3] == ["CMD", "setpriv", "--reuid=65534"] and "-I" in spec
    # The same command, run by hand: it answers as nobody. (Right after a start TensorBoard may still
    # be starting: the fixtures wait for SSH and JupyterLab only.)
    command = " ".join(spec[1:]) + "; " + " ".join([*spec[1:5], "id", "-u"])
    out = wait_until(lambda: (answer := hws.exec(command)).startswith("healthy") and answer, timeout=90)
    assert out.splitlines() == ["healthy", "65534"]


# ---- 2: keys only from the configured sources ----------------------------------------------------
def test_a_key_added_in_a_session_never_logs_in(hws: Workstation) -> None:
    extra = hws.tmp / "extra_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(extra)], check=True)
    pub = extra.with_suffix(".pub").read_text().strip()
    as_yolo(
        hws, f"mkdir -p ~/.ssh && echo '{pub}' >> ~/.ssh/authorized_keys && chmod 600 ~/.ssh/authorized_keys"
    )

    def login_with_extra() -> int:
        argv = hws.ssh_argv()
        argv[argv.index(str(hws.key))] = str(extra)
        return subprocess.run([*argv, "true"], capture_output=True, timeout=30, check=False).returncode

    assert login_with_extra() == 255
    restart(hws)
    assert login_with_extra() == 255
    assert hws.ssh("true").returncode == 0  # the configured key still works


# ---- 5, 6: secrets stay with their consumers -----------------------------------------------------
def test_secrets_reach_no_kernel_terminal_or_session(hws: Workstation) -> None:
    code = "import os; print(sorted(k for k in os.environ if 'PASSWORD' in k or 'TOKEN' in k))"
    args = ("exec", "-T", "workstation", "timeout", "70", "python", "-", code, "reply", TOKEN)
    result = hws.compose(*args, input=workstation.KERNEL_CELL, check=False)
    assert "OUTPUT:[]" in result.stdout, result.stdout + result.stderr
    count = 'echo "R""ESULT@@$(env | grep -c -e PASSWORD -e TOKEN)@@"'
    result_line = workstation.RESULT_LINE
    args = ("exec", "-T", "workstation", "timeout", "40", "python", "-", count, result_line, TOKEN)
    term = hws.compose(*args, input=workstation.TERMINAL, check=False)
    assert "RESULT@@0@@" in term.stdout, term.stdout + term.stderr
    assert as_yolo(hws, "env | grep -c -E 'PASSWORD|TOKEN'; true").strip() == "0"
    # JupyterLab itself has the token on its stdin, not in its environment, and no login can read
    # its environment, descriptors or memory (it is not dumpable: issue 26's test_hostile_user).
    environ = hws.ssh("cat /proc/$(pgrep -o -u yolo -f '[.]labserver')/environ")
    assert environ.returncode != 0 and "Permission denied" in environ.stderr, environ
    assert hws.exec("ls /run/rig").split() == ["jupyter", "services.json", "urls"]  # (runtime folder)
    # The password still works: sshd's database got it.
    assert hws.ssh("true", password=PASSWORD).returncode == 0


def test_no_session_gets_the_token_of_a_new_start_and_stopping_starts_is_not_fatal(hws: Workstation) -> None:
    # JupyterLab runs from an interpreter yolo may execute but not read: never dumpable.
    python = "/opt/venv/libexec/jupyter-python"
    assert hws.exec(f"stat -c '%U %a' {python}").split() == ["root", "711"]
    hws.compose("cp", str(SCRIPTS / "token_probe.py"), "workstation:/tmp/token_probe.py")
    cid = hws.compose("ps", "-q", "workstation").stdout.strip()
    fmt = "{{.RestartCount}} {{.State.StartedAt}}"

    def container() -> str:
        return subprocess.run(["docker", "inspect", "-f", fmt, cid], capture_output=True, text=True).stdout

    before = container()
    # Ten new starts, each raced from its fork on: ptrace, pidfd_getfd (seccomp unconfined), /proc.
    out = as_yolo(hws, "python -I /tmp/token_probe.py steal 10", timeout=600)
    tries = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(tries) == 10 and all(t["seen"] for t in tries), out  # every start was seen
    assert [t for t in tries if t["attached"] or t["fd"] or t["token"]] == [], out
    # Five starts in a row stopped at once, then let go: refused, never counted as failures.
    as_yolo(hws, "python -I /tmp/token_probe.py stop 5", timeout=300)
    wait_until(lambda: hws.services()["jupyter"]["state"] == "running", timeout=120, interval=0.5)
    auth = {"Authorization": f"token {TOKEN}"}
    assert requests.get(f"{hws.jupyter}/api/status", headers=auth, timeout=10).status_code == 200
    logs = hws.logs()
    refused = [line for line in logs.splitlines() if "a session's doing, not the service failing" in line]
    assert len(refused) >= 5 and all(line.startswith("WARNING jupyter: ") for line in refused), logs[-3000:]
    assert "FATAL" not in logs and container() == before


def test_docker_run_gets_no_secret(containers: Containers) -> None:
    env = {
        "SSH_PASSWORD": PASSWORD,
        "JUPYTER_TOKEN": TOKEN,
        "JUPYTER_TOKEN_FILE": "/x",
        "SSH_PASSWORD_FILE": "/y",
    }
    rc, out = containers.oneshot(["env"], timeout=60, environment=env)
    assert rc == 0, out
    assert not [line for line in out.splitlines() if "PASSWORD" in line or "TOKEN" in line], out
    rc, out = containers.oneshot(["env"], timeout=60, environment={**env, "RIG_USER": "root"})
    assert rc == 0 and "PASSWORD" not in out and "TOKEN" not in out, out


def test_a_secret_file_yolo_can_read_is_named_once(containers: Containers, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("a-token-readable-by-everyone\n")
    token_file.chmod(0o644)
    c = containers.run(
        None,
        environment={"JUPYTER_TOKEN_FILE": "/run/secrets/token", "RIG_SERVICES": "jupyter"},
        volumes={str(token_file): {"bind": "/run/secrets/token", "mode": "ro"}},
    )
    wait_until(lambda: "running on port 8888" in c.logs().decode(), timeout=90, interval=0.5)
    warned = warnings_in(c.logs().decode())
    assert len(warned) == 1, warned
    assert warned[0].startswith(
        "WARNING serve: JUPYTER_TOKEN_FILE: /run/secrets/token is readable by user yolo"
    )
    assert "chmod 600" in warned[0]


# ---- 7: TensorBoard only behind the authentication users already have ---------------------------------
def test_tensorboard_needs_the_token_or_the_ssh_tunnel(hws: Workstation, containers: Containers) -> None:
    hws.exec("mkdir -p /workspace/runs")
    wait_until(lambda: hws.services()["tensorboard"]["state"] == "running", timeout=90, interval=1)
    probe = (
        "import sys, urllib.request as u\n"
        "for url in sys.argv[1:]:\n"
        "    try:\n"
        "        r = u.urlopen(u.Request(url), timeout=10); body = r.read(3000).decode(errors='replace')\n"
        "        print(url, r.status, 'TB' if 'tb-relative-root' in body else 'other')\n"
        "    except Exception as e:\n"
        "        print(url, 'refused' if 'refused' in str(e) else type(e).__name__ + ' ' + str(e)[:80])\n"
    )
    base = "http://workstation"
    _rc, out = containers.oneshot(
        [
            "python",
            "-c",
            probe,
            f"{base}:6006/",
            f"{base}:8888/proxy/6006/",
            f"{base}:8888/proxy/6006/?token={TOKEN}",
        ],
        timeout=60,
        network=f"{hws.project}_default",
    )
    lines = out.strip().splitlines()[-3:]
    assert lines[0].endswith("refused"), out  # no open TensorBoard port on the network
    assert not lines[1].endswith("TB"), out  # the proxy without the token: Jupyter's login page
    assert lines[2].endswith("200 TB"), out
    # Through the SSH tunnel, as docs/workstation.md says.
    local = free_port()
    tunnel = subprocess.Popen(
        [*hws.ssh_argv()[:-1], "-N", "-L", f"{local}:localhost:6006", hws.ssh_argv()[-1]],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        page = wait_until(lambda: requests.get(f"http://127.0.0.1:{local}/", timeout=5), timeout=30)
        assert page.status_code == 200 and "tb-relative-root" in page.text
    finally:
        tunnel.kill()
        tunnel.wait()


# ---- 9: many sessions at once ---------------------------------------------------------------------
def test_a_hundred_ssh_connections_at_once(hws: Workstation) -> None:
    argv = [*hws.ssh_argv(), "echo ok"]
    argv[argv.index("ConnectTimeout=5")] = "ConnectTimeout=60"

    def one(_: int) -> str:
        return subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False).stdout.strip()

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=100) as pool:
        results = list(pool.map(one, range(100)))
    print(f"100 simultaneous SSH logins took {time.monotonic() - started:.1f} s")
    assert results.count("ok") == 100, results


# ---- 10: nothing left in the volumes wedges the start ----------------------------------------------
@pytest.mark.parametrize(
    ("plant", "expected"),
    [
        (
            "rm -rf runs && echo x > runs && truncate -s 1T notebooks/quickstart.ipynb",
            [
                "skipped /workspace/runs: it is a file, not a folder",
                "skipped /workspace/notebooks/quickstart.ipynb: it is larger than 64 MiB",
            ],
        ),
        (
            "mkfifo notebooks/.rig-seeded.json",
            ["skipped /workspace/notebooks/.rig-seeded.json: it is a FIFO"],
        ),
        (
            "rm -rf notebooks && echo x > notebooks",
            ["skipped /workspace/notebooks: it is a file, not a folder"],
        ),
        (
            "ln -s /dev/zero notebooks/.rig-seeded.json",
            ["skipped /workspace/notebooks/.rig-seeded.json: it is a symbolic link"],
        ),
        (
            "mkdir notebooks/.rig-seeded.json",
            ["skipped /workspace/notebooks/.rig-seeded.json: it is a folder, not a regular file"],
        ),
    ],
    ids=[
        "file-for-runs-and-sparse-notebook",
        "fifo",
        "file-for-folder",
        "dev-zero-link",
        "folder-for-manifest",
    ],
)
def test_what_a_user_leaves_never_wedges_the_start(hws: Workstation, plant: str, expected: list[str]) -> None:
    as_yolo(hws, "cd /workspace && rm -rf runs notebooks && mkdir -p runs notebooks && " + plant)
    log = restart(hws)  # restart() waits for SSH and Jupyter to answer
    warned = warnings_in(log)
    assert len(warned) == len(expected), log
    for line, text in zip(warned, expected, strict=True):
        assert line.startswith("WARNING workspace: " + text), log
    rss_kb = int(
        hws.exec("ps -o rss= -p $(pgrep -f '^/opt/venv/bin/python3? (-I )?/opt/venv/bin/rig serve')").strip()
    )
    assert rss_kb < 200_000, f"rig serve holds {rss_kb} kB"
    as_yolo(hws, "cd /workspace && rm -rf runs notebooks && mkdir runs")


# ---- 12: a new RIG_UID re-owns what yolo owned, following no link ------------------------------------
def test_a_new_rig_uid_takes_over_runs_and_notebooks(image: str, tmp_path: Path) -> None:
    ws = start("rig-uid", tmp_path, RIG_UID="4321", RIG_GID="4322")
    with running(ws):
        as_yolo(ws, "mkdir -p /workspace/runs/detect/train && echo w > /workspace/runs/detect/train/last.pt")
        as_yolo(ws, "ln -s /opt/venv /workspace/venv-link && ln -s /etc/passwd /workspace/runs/passwd-link")
        ws.compose("down", "-t", "30")  # keeps the volumes
        ws.env.update(RIG_UID="5555", RIG_GID="5556")
        up(ws)
        out = as_yolo(
            ws,
            "id -u; cd /workspace; touch runs/new notebooks/new runs/detect/train/last.pt && echo writable; "
            "stat -c %u:%g runs/detect/train/last.pt notebooks/quickstart.ipynb",
        )
        assert out.split() == ["5555", "writable", "5555:5556", "5555:5556"], out
        assert owners(ws, "/opt/venv", "/opt/venv/bin/rig", "/etc/passwd") == [
            "/opt/venv 0:0 755",
            "/opt/venv/bin/rig 0:0 755",
            "/etc/passwd 0:0 644",
        ]
        assert "gave " in ws.logs() and "to uid 5555 gid 5556" in ws.logs()
