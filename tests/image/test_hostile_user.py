"""The workstation tried again as a hostile `yolo` (issue 26): an SSH login, the right to restart the
container, and what a user can leave in /workspace, ~/.jupyter, /proc names or a full disk.
Real clients, real restarts, the real `rig train`/`rig launch` through torchrun and the binder."""

from __future__ import annotations

import base64
import json
import os
import shlex
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.helpers import SCRIPTS
from tests.helpers.fakesys import FakeSys, bus
from tests.helpers.waiting import wait_until
from tests.helpers.workstation import (
    KERNEL_CELL,
    RESULT_LINE,
    TERMINAL,
    Workstation,
    as_yolo,
    restart,
    running,
    start,
    up,
)

pytestmark = pytest.mark.image

# A package planted where `python -m` would find it first: it notes who imported it, and where.
PLANT = (
    "import os, sys\n"
    "with open('/workspace/planted.log', 'a') as f:\n"
    "    f.write(f'{__name__} uid={os.getuid()} argv={sys.argv!r}\\n')\n"
)


@pytest.fixture(scope="module")
def ws(image: str) -> Iterator[Workstation]:
    with tempfile.TemporaryDirectory(prefix="harden-") as d:
        ws = start("harden-hostile", Path(d))
        with running(ws):
            yield ws


def write(text: str, path: str) -> str:
    """A shell command that writes text to path exactly (no quoting or escapes on the way)."""
    return f"echo {base64.b64encode(text.encode()).decode()} | base64 -d > {path}"


def _fake_sys(ws: Workstation, tmp: Path) -> tuple[Path, str]:
    """A one-GPU fake /sys, copied into the container at /fake/sys; its folder and the options."""
    root = tmp / "fake"
    FakeSys(root / "sys").node(0, "0-1").online("0-1").cpuset("0-1").gpu(bus(0), 0, "0-1")
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    ws.compose("cp", str(root), "workstation:/fake")
    return root, f"--sysfs-root /fake/sys --gpu-bus-ids {bus(0)}"


# ---- 1: nothing in /workspace is imported by our Pythons --------------------------------------------
def test_packages_planted_in_the_workspace_are_never_imported(ws: Workstation, tmp_path: Path) -> None:
    root, topo = _fake_sys(ws, tmp_path)
    as_yolo(ws, "rig demo-data /datasets/tiny --train 4 --val 2 --imgsz 64 --force", timeout=120)
    plant = " && ".join(
        f"mkdir -p /workspace/{name} && {write(PLANT, f'/workspace/{name}/__init__.py')}"
        for name in ("rig", "torch", "ultralytics")
    )
    as_yolo(ws, f"set -e; {plant}; rm -f /workspace/planted.log")
    restart(ws)  # JupyterLab and TensorBoard start again (their working folder was /workspace)
    # TensorBoard and JupyterLab run isolated (-I); JupyterLab from /workspace, where terminals open,
    # with the execute-only interpreter (never dumpable: tokengate).
    for server, python in (
        ("boardserver", "/opt/venv/bin/python"),
        ("labserver", "/opt/venv/libexec/jupyter-python"),
    ):
        args = as_yolo(ws, f"ps -o args= -p $(pgrep -o -u yolo -f '[.]{server}')")
        assert f"{python} -I -m rig.workstation.{server} " in args, args
    pwd = 'echo "R""ESULT@@$(pwd)@@"'
    term = ws.compose(
        "exec", "-T", "workstation", "timeout", "40", "python", "-", pwd, RESULT_LINE, input=TERMINAL
    )
    assert "RESULT@@/workspace@@" in term.stdout, term.stdout + term.stderr  # where terminals open
    # A CPU run, torchrun over the binder and the trainer, a `rig launch`, as yolo from /workspace;
    # then as root (RIG_USER=root, what the PyTorchJob manifest sets) in a one-shot container like
    # `make train`'s. None needs to train: each has imported rig, torch and Ultralytics by the time
    # it finds no model file (no GPU here either).
    # Root trains in a project of its own: it never writes into yolo's runs folder.
    data = "data=/datasets/tiny/data.yaml model=/nowhere/model.yaml epochs=1 imgsz=64 batch=2 workers=0"

    def jobs(project: str = "") -> tuple[str, ...]:
        return (
            f"rig train device=cpu {data}{project}",
            f"rig train {topo} --gpus 1 {data}{project}",
            f"rig launch {topo} -- /bin/true",
        )

    for job in jobs():
        out = ws.ssh(f"cd /workspace && timeout 150 {job}", timeout=180)
        assert "INFO launch: Executing: " in out.stdout + out.stderr, out.stdout + out.stderr  # got that far
    for job in jobs(" project=/tmp/root-runs"):
        run = ws.compose(
            "run", "--rm", "--no-deps", "-e", "RIG_USER=root", "-v", f"{root}:/fake:ro", "workstation",
            "timeout", "150", *job.split(), timeout=240, check=False,
        )  # fmt: skip
        assert "INFO launch: Executing: " in run.stdout + run.stderr, run.stdout + run.stderr
    planted = ws.exec("cat /workspace/planted.log 2>/dev/null; true")
    assert planted == "", planted


# ---- 2: a token per start, for the server alone; ~/.jupyter changes nothing ----------------------
# Config a session plants to open the server at its next start: no token, a password it knows.
# Each Python config also leaves a mark if it runs at all.
OPEN_UP = (
    "import os; open('/tmp/config-ran-' + str(os.getpid()), 'w').close()\n"
    "c.IdentityProvider.token = ''\nc.ServerApp.token = ''\n"
    "c.PasswordIdentityProvider.hashed_password = {hash!r}\nc.ServerApp.password = {hash!r}\n"
)
PASSWORD = "a-password-the-session-knows"


def _login(ws: Workstation, password: str) -> int:
    """What the API answers after a login with `password` on JupyterLab's login page."""
    with requests.Session() as s:
        s.get(f"{ws.jupyter}/login", timeout=10)
        data = {"password": password, "_xsrf": s.cookies.get("_xsrf", "")}
        s.post(f"{ws.jupyter}/login", data=data, timeout=10, allow_redirects=False)
        return s.get(f"{ws.jupyter}/api/status", timeout=10).status_code


def test_the_token_is_new_at_every_start_and_no_session_can_read_or_replace_it(ws: Workstation) -> None:
    hashed = as_yolo(
        ws, f"python -c 'from jupyter_server.auth import passwd; print(passwd(\"{PASSWORD}\"))'"
    ).strip()
    config = OPEN_UP.format(hash=hashed)
    as_yolo(
        ws,
        "set -e; rm -f /tmp/config-ran-*; mkdir -p ~/.jupyter ~/.local/etc/jupyter; "
        + " ".join(
            f"{write(config, path)};"
            for path in (
                "~/.jupyter/jupyter_server_config.py",
                "~/.jupyter/jupyter_config.py",
                "~/.jupyter/jupyter_lab_config.py",
                "~/.local/etc/jupyter/jupyter_server_config.py",
                "/workspace/jupyter_server_config.py",
            )
        )
        + ' printf \'%s\' \'{"IdentityProvider": {"token": ""}}\' > ~/.jupyter/jupyter_server_config.json',
    )
    old = ws.token()
    restart(ws)
    new = ws.token()
    assert new != old and len(new) >= 32
    status = f"{ws.jupyter}/api/status"
    assert requests.get(status, timeout=10).status_code == 403  # no token: no way in
    assert requests.get(status, headers={"Authorization": f"token {old}"}, timeout=10).status_code == 403
    assert requests.get(status, headers={"Authorization": f"token {new}"}, timeout=10).status_code == 200
    assert _login(ws, PASSWORD) == 403 and _login(ws, new) == 200
    assert as_yolo(ws, "ls /tmp | grep -c config-ran; true").strip() == "0"  # no config of yolo's ran
    # Everything a login can read: files, every process's environment and command line, the server's
    # descriptors and memory. The token is in none of them.
    server = as_yolo(ws, "pgrep -o -u yolo -f '[.]labserver'").strip()
    # The token comes on stdin into a shell variable: never in this search's own argv or environment.
    found = 'grep -q -a -F -f <(printf "%s\\n" "$T") && echo FOUND'
    script = (
        "read -r T; "
        'grep -r -l -F -f <(printf "%s\\n" "$T") /run /tmp /home/yolo /workspace /var/tmp /dev/shm '
        "2>/dev/null; "
        f"for p in /proc/[0-9]*; do cat $p/environ $p/cmdline 2>/dev/null | {found} $p; done; "
        f"for f in /proc/{server}/fd/*; do timeout 2 cat $f 2>/dev/null | {found} $f; done; "
        f'python -c \'open("/proc/{server}/mem", "rb")\' 2>&1 | tail -1; '
        f"ls /proc/{server}/fd 2>&1 | tail -1"
    )
    looked = subprocess.run(
        [*ws.ssh_argv(), script], input=new + "\n", capture_output=True, text=True, timeout=120, check=False
    )
    out = looked.stdout.splitlines()
    assert out[:-2] == [], looked.stdout  # no file named, nothing FOUND
    assert out[-2].startswith("PermissionError") and "Permission denied" in out[-1], looked.stdout
    # A restart of the server alone (yolo kills it): a new token again, and `make up`'s file follows.
    kill_jupyter(ws)
    third = ws.token()
    assert third not in (old, new) and len(third) >= 32
    authorized = {"Authorization": f"token {third}"}
    wait_until(lambda: requests.get(status, headers=authorized, timeout=10).status_code == 200, timeout=90)
    assert requests.get(status, headers={"Authorization": f"token {new}"}, timeout=10).status_code == 403


# ---- 4: the stop survives any process name, and scripts get TERM and their grace ------------------
# A job that saves on TERM (after a second of work), named by argv[1] as raw bytes (prctl), or not.
SAVER = (SCRIPTS / "term_saver.py").read_text()
SCRIPT = "trap 'sleep 1; echo saved > {out}; exit 0' TERM; touch {out}.ready; sleep 1000 & wait"


def test_a_stop_gives_every_job_its_term_whatever_its_name_or_shell(ws: Workstation) -> None:
    d = "/workspace/stop-jobs"
    as_yolo(ws, f"rm -rf {d} && mkdir -p {d} && {write(SAVER, d + '/saver.py')}")
    as_yolo(ws, write(SCRIPT.format(out=d + "/bash-script"), d + "/job.sh"))
    jobs = (
        f"python {d}/saver.py fffe {d}/latin1-name",  # a name that is no UTF-8
        f"python {d}/saver.py {b'x) (y'.hex()} {d}/odd-name",
        f"python {d}/saver.py 1b5b324a0d {d}/escape-name",  # ESC[2J CR
        f"bash {d}/job.sh",  # a script: its TERM trap must run
        f"bash -c {SCRIPT.format(out=d + '/bash-c')!r}",
    )
    for job in jobs:
        as_yolo(ws, f"setsid nohup {job} >/dev/null 2>&1 < /dev/null &")
    names = ("latin1-name", "odd-name", "escape-name", "bash-script", "bash-c")
    ready = {f"{n}.ready" for n in names}
    wait_until(lambda: ready <= set(as_yolo(ws, f"ls {d}").split()), timeout=60)
    restart(ws)
    saved = ws.exec(f"cd {d} && for n in {' '.join(names)}; do echo $n $(cat $n 2>/dev/null); done")
    assert saved.split("\n")[:-1] == [f"{n} saved" for n in names], saved + ws.logs()[-3000:]
    stop_lines = [line for line in ws.logs().splitlines() if "SIGTERM to the sessions' jobs" in line]
    assert stop_lines and all(line.isprintable() for line in stop_lines), stop_lines


# ---- 7: a full disk never stops the supervisor -------------------------------------------------------
def _container(ws: Workstation) -> dict[str, str]:
    cid = ws.compose("ps", "-q", "workstation").stdout.strip()
    fmt = "{{.RestartCount}} {{.State.StartedAt}}"
    out = subprocess.run(["docker", "inspect", "-f", fmt, cid], capture_output=True, text=True, check=True)
    count, started = out.stdout.split()
    return {"restarts": count, "started": started}


def kill_jupyter(ws: Workstation) -> None:
    """As yolo: SIGKILL to its own JupyterLab server; back once a new one runs."""
    find = "pgrep -o -u yolo -f '[.]labserver'; true"
    old = as_yolo(ws, find).strip()
    as_yolo(ws, f"kill -KILL {old}")
    wait_until(lambda: as_yolo(ws, find).strip() not in ("", old), timeout=60, interval=0.5)


def test_a_full_disk_costs_one_warning_not_the_workstation(image: str, tmp_path: Path) -> None:
    # /run/rig on a small tmpfs of its own: filling it is a full disk for rig serve's state writes,
    # without filling the host's disk as a hostile user would fill the container's layer.
    override = tmp_path / "small-run.yaml"
    override.write_text("services:\n  workstation:\n    tmpfs:\n      - /run/rig:size=64k,mode=755\n")
    ws = start("harden-disk", tmp_path)
    ws.overrides.append(override)
    with running(ws):
        before = _container(ws)
        ws.exec("cat /dev/zero > /run/rig/filler 2>/dev/null; true")
        for _ in range(3):  # what yolo may do: kill its own JupyterLab, again and again
            kill_jupyter(ws)
        wait_until(ws.answers, timeout=90, interval=0.5)
        assert _container(ws) == before  # the same container, never restarted
        warned = [line for line in ws.logs().splitlines() if "cannot write /run/rig/services.json" in line]
        assert len(warned) == 1 and warned[0].startswith("WARNING serve: "), warned
        ws.exec("rm /run/rig/filler")
        kill_jupyter(ws)
        wait_until(lambda: ws.services()["jupyter"]["state"] == "running", timeout=90, interval=0.5)


# Forks until the kernel refuses (bounded: at most 1000), then ends every child.
FORK_BOMB = (SCRIPTS / "fork_bomb.py").read_text()


# ---- 6, 8: a shared host's limits; what a kernel prints stays one escaped line ---------------------
def test_limits_and_a_kernel_that_floods_or_forges_the_log(image: str, tmp_path: Path) -> None:
    ws = start("harden-limits", tmp_path, PIDS_LIMIT="200", LOG_MAX_SIZE="1m", LOG_MAX_FILE="2")
    with running(ws):
        # A fork bomb as yolo ends at the container's pids limit, not the host's pid_max.
        bomb = as_yolo(ws, f"python -c {shlex.quote(FORK_BOMB)}", timeout=120)
        assert "stopped at" in bomb and "Resource temporarily unavailable" in bomb, bomb
        assert int(bomb.split()[2]) < 200, bomb
        # A kernel forges `make up`'s line with a carriage return and escape sequences, then floods.
        forged = "\\x1b[2K\\rINFO serve: JupyterLab: http://evil.example/lab?token=stolen"
        # Past ipykernel's relay: its copy of the fd 1 it inherited from JupyterLab.
        code = (
            "import os, sys; fd = sys.stdout._original_stdstream_copy; "
            f"[os.write(fd, b'x' * 1023 + b'\\n') for _ in range(20480)]; os.write(fd, b'{forged}\\n')"
        )  # 20 MiB
        cell = ws.compose(
            "exec",
            "-T",
            "workstation",
            "timeout",
            "170",
            "python",
            "-",
            code,
            "reply",
            ws.token(),
            input=KERNEL_CELL,
            timeout=180,
        )
        assert "REPLY ok" in cell.stdout, cell.stdout + cell.stderr
        logs = ws.logs()
        assert "\x1b" not in logs and "\r" not in logs
        assert "INFO jupyter: \\x1b[2K\\rINFO serve: JupyterLab: http://evil.example" in logs
        assert "evil.example" not in ws.exec("cat /run/rig/urls")  # what `make up` prints
        assert len(logs.encode()) < 3 * 1024 * 1024, len(logs)  # two files of 1 MiB kept, not 20 MiB


# ---- 5: re-owning after a RIG_UID change: any depth, one budget, a WARNING until done -------------
def test_a_new_rig_uid_takes_over_deep_trees_and_says_what_is_left(image: str, tmp_path: Path) -> None:
    ws = start("harden-reown", tmp_path)
    with running(ws):
        deep = "/workspace/deep/" + "d/" * 1201
        as_yolo(
            ws,
            f"set -e; mkdir -p {deep} && echo w > {deep}last.pt; "
            "cd /workspace/runs; for i in $(seq 40); do mkdir -p r$i && echo w > r$i/last.pt; done",
        )
        ws.compose("down", "-t", "30")  # keeps the volumes
        ws.env.update(RIG_UID="5555", RIG_GID="5556", RIG_REOWN_BUDGET_S="0")  # no time at all
        up(ws)
        for _ in range(2):  # at every start until done, with the count left
            unfinished = [line for line in ws.logs().splitlines() if "re-owning /workspace " in line]
            assert unfinished and unfinished[-1].startswith("WARNING users: "), unfinished
            left = int(unfinished[-1].split("is not finished: ")[1].split()[0])
            assert left > 1240 and "entries still belong to uid 1000 gid 1000" in unfinished[-1], unfinished
            restart(ws)
        assert len([line for line in ws.logs().splitlines() if "re-owning /workspace" in line]) >= 2
        ws.compose("down", "-t", "30")
        del ws.env["RIG_REOWN_BUDGET_S"]
        up(ws)
        out = as_yolo(
            ws,
            f"touch {deep}last.pt /workspace/runs/r*/last.pt && echo writable; "
            "find /workspace -user 1000 | wc -l",
        )
        assert out.split() == ["writable", "0"], out
        assert "is not finished" not in ws.logs()


# ---- 9: the smaller items ------------------------------------------------------------------------------
def test_kills_agents_connections_and_root_caches(ws: Workstation, tmp_path: Path) -> None:
    # Killing its own JupyterLab, more often than the restart budget (5): the box stays up.
    cid = ws.compose("ps", "-q", "workstation").stdout.strip()
    fmt = "{{.RestartCount}} {{.State.StartedAt}}"

    def state() -> str:
        return subprocess.run(["docker", "inspect", "-f", fmt, cid], capture_output=True, text=True).stdout

    before = state()
    for _ in range(7):
        kill_jupyter(ws)
    wait_until(ws.answers, timeout=90, interval=0.5)
    assert state() == before and "FATAL" not in ws.logs()
    # sshd: no agent forwarding, and a cap on one address's unauthenticated connections.
    effective = ws.exec("/usr/sbin/sshd -T -f /etc/ssh/sshd_config -C user=yolo,host=x,addr=127.0.0.1")
    assert "allowagentforwarding no" in effective and "persourcemaxstartups 128" in effective
    agent = subprocess.run(["ssh-agent", "-s"], capture_output=True, text=True, check=True).stdout
    sock = agent.split("SSH_AUTH_SOCK=")[1].split(";")[0]
    pid = agent.split("SSH_AGENT_PID=")[1].split(";")[0]
    try:
        argv = [*ws.ssh_argv()[:-1], "-A", ws.ssh_argv()[-1], 'echo "agent=${SSH_AUTH_SOCK:-none}"']
        env = {**os.environ, "SSH_AUTH_SOCK": sock}
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
        assert out.stdout.strip() == "agent=none", out.stdout + out.stderr
    finally:
        subprocess.run(["kill", pid], check=False)
    # A command that stays root gets compile caches of its own, not the cache volume yolo writes.
    run = ws.compose(
        "run", "--rm", "--no-deps", "-e", "RIG_USER=root", "workstation", "sh", "-c",
        "echo $TORCHINDUCTOR_CACHE_DIR $TRITON_CACHE_DIR", timeout=180,
    )  # fmt: skip
    assert run.stdout.split()[-2:] == ["/root/.cache/torch/inductor", "/root/.cache/torch/triton"], run.stdout


# ---- round 4: a login bound to its start; the home loads nothing into the services; root's
# Pythons isolated; ports only the services hold. Everything is planted once and the container
# restarted once (one fixture); the ports are tried without a restart; the opt-in last.
HOME_SITE = "/home/yolo/.local/lib/python3.11/site-packages"
TEMPLATE = "PLANTED-TEMPLATE {{ 6 * 7 }}\n"  # Jinja: if the server renders it, the export says 42
LABEXT = (
    '{"name": "planted-ext", "version": "1.0.0", "jupyterlab": {"_build": {"load": "static/remoteEntry.js"}}}'
)
KERNEL = (
    '{"argv": ["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"], "display_name": "Planted"}'
)
# Run by jupyter_lsp's probe of R's language server, if it runs: leaves a mark in the home.
RSCRIPT = '#!/bin/sh\necho "$(id -u) $*" >> /home/yolo/rscript-ran.log\necho /fake\n'
SERVER_EXT = (
    "import pathlib\n"
    "def _jupyter_server_extension_points():\n    return [{'module': 'planted_ext'}]\n"
    "def _load_jupyter_server_extension(app):\n    pathlib.Path('/home/yolo/server-ext-ran.log').touch()\n"
)
SERVER_EXT_ON = '{"ServerApp": {"jpserver_extensions": {"planted_ext": true}}}'
NOTEBOOK = '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'


def _plants() -> dict[str, str]:
    """Path -> content of every file a hostile session leaves for the services and for root."""
    data = "/home/yolo/.local/share/jupyter"
    files = {
        f"{data}/nbconvert/templates/lab/index.html.j2": TEMPLATE,
        "/workspace/lab/index.html.j2": TEMPLATE,  # nbconvert's default: templates from the working folder
        f"{data}/labextensions/planted-ext/package.json": LABEXT,
        f"{data}/labextensions/planted-ext/static/remoteEntry.js": "alert('planted')\n",
        f"{data}/kernels/planted/kernel.json": KERNEL,
        "/home/yolo/.local/bin/Rscript": RSCRIPT,
        f"{HOME_SITE}/planted_ext.py": SERVER_EXT,
        "/home/yolo/.local/etc/jupyter/jupyter_server_config.d/planted.json": SERVER_EXT_ON,
        "/workspace/hostile.ipynb": NOTEBOOK,
    }
    for folder in ("/workspace", HOME_SITE):
        for module in ("rig/__init__.py", "pip/__init__.py", "sitecustomize.py", "usercustomize.py"):
            files[f"{folder}/{module}"] = PLANT
    for script in ("rig", "pip"):
        files[f"/home/yolo/.local/bin/{script}"] = (
            '#!/bin/sh\necho "script $0 uid=$(id -u)" >> /workspace/planted.log\n'
        )
    return files


def _planted_log(ws: Workstation) -> list[str]:
    return ws.exec("cat /workspace/planted.log 2>/dev/null; true").splitlines()


@pytest.fixture(scope="module")
def planted(ws: Workstation) -> requests.Session:
    """The plants above, then one restart; yields a browser session logged in before the restart."""
    browser = requests.Session()
    assert browser.get(f"{ws.jupyter}/lab?token={ws.token()}", timeout=30).status_code == 200
    assert browser.get(f"{ws.jupyter}/api/terminals", timeout=10).status_code == 200  # the cookie alone
    files = _plants()
    script = " && ".join(f"mkdir -p {os.path.dirname(p)} && {write(c, p)}" for p, c in files.items())
    as_yolo(
        ws, f"set -e; {script}; chmod +x /home/yolo/.local/bin/*; rm -f /workspace/planted.log ~/*-ran.log"
    )
    restart(ws)
    return browser  # the plants go with the volumes (the ws fixture's `down -v`)


def test_a_restart_ends_every_login_and_no_session_can_forge_one(
    ws: Workstation, planted: requests.Session
) -> None:
    terminals = f"{ws.jupyter}/api/terminals"
    assert planted.get(terminals, timeout=10).status_code == 403  # logged in before the restart: no more
    host = f"127.0.0.1:{ws.env['JUPYTER_PORT']}"
    as_yolo(ws, write((SCRIPTS / "forge_cookie.py").read_text(), "/tmp/forge_cookie.py"))
    out = as_yolo(ws, f"python -I /tmp/forge_cookie.py {host}").splitlines()
    assert out[0].startswith("FOUND 0"), out  # no cookie secret anywhere a session can read
    for cookie in out[1:]:  # (on an image that keeps it in a file: each must be refused)
        assert requests.get(terminals, headers={"Cookie": cookie}, timeout=10).status_code == 403, cookie
    fresh = requests.Session()
    assert fresh.get(f"{ws.jupyter}/lab?token={ws.token()}", timeout=30).status_code == 200
    assert fresh.get(terminals, timeout=10).status_code == 200  # a login of this start works
    assert as_yolo(ws, "ls -A /run/rig/jupyter | grep -v '^kernel-'; true").strip() == ""


def test_the_server_loads_nothing_a_session_adds_to_the_home(
    ws: Workstation, planted: requests.Session
) -> None:
    auth = {"Authorization": f"token {ws.token()}"}
    export = requests.get(
        f"{ws.jupyter}/nbconvert/html/hostile.ipynb?download=false", headers=auth, timeout=60
    )
    assert export.status_code == 200 and "PLANTED-TEMPLATE" not in export.text, export.text[:300]
    specs = requests.get(f"{ws.jupyter}/api/kernelspecs", headers=auth, timeout=10).json()["kernelspecs"]
    assert sorted(specs) == ["python3"], sorted(specs)
    lab = requests.get(f"{ws.jupyter}/lab", headers=auth, timeout=30).text
    assert "federated_extensions" in lab and "planted-ext" not in lab
    # Nothing ran: no language-server probe of ~/.local/bin/Rscript, no server extension from ~/.local.
    assert as_yolo(ws, "ls ~ | grep -- '-ran.log$'; true").strip() == ""
    # The export checked the notebook's trust: the key that signs trusted notebooks is nowhere a
    # session could read it (with it, a session would make its notebook's scripts run in the browser).
    secrets = as_yolo(
        ws, "find / -xdev \\( -name notebook_secret -o -name nbsignatures.db \\) 2>/dev/null; true"
    )
    assert secrets.strip() == "", secrets


def test_services_and_root_import_nothing_from_the_workspace_or_the_home(
    ws: Workstation, planted: requests.Session
) -> None:
    # JupyterLab and TensorBoard started again after the plants (the restart): nothing imported.
    assert {ws.services()[s]["state"] for s in ("jupyter", "tensorboard")} == {"running"}
    assert _planted_log(ws) == []
    # As root, from /workspace (where `docker exec` starts), also with a PYTHONPATH into the plants.
    cid = ws.compose("ps", "-q", "workstation").stdout.strip()
    fmt = "{{json .Config.Healthcheck.Test}}"
    healthcheck = json.loads(
        subprocess.run(
            ["docker", "inspect", "-f", fmt, cid], capture_output=True, text=True, check=True
        ).stdout
    )
    assert healthcheck[0] == "CMD", healthcheck
    commands = (
        ["pip", "--version"],
        ["rig", "--version"],
        ["rig", "health"],
        ["rig", "exec", "--", "true"],
        healthcheck[1:],
    )
    for env in ([], ["-e", f"PYTHONPATH=/workspace:{HOME_SITE}"]):
        for command in commands:
            subprocess.run(
                ["docker", "exec", "-u", "root", *env, cid, "timeout", "60", *command],
                capture_output=True,
                timeout=90,
            )
    assert _planted_log(ws) == []
    refused = subprocess.run(
        ["docker", "exec", "-u", "root", cid, "pip", "--version"], capture_output=True, text=True, timeout=90
    )
    assert refused.returncode != 0 and refused.stderr.startswith("ERROR pip: installs into user yolo's"), (
        refused.stderr
    )


def _health(ws: Workstation) -> str:
    cid = ws.compose("ps", "-q", "workstation").stdout.strip()
    out = subprocess.run(["docker", "exec", cid, "rig", "health"], capture_output=True, text=True, timeout=60)
    return out.stdout.strip()


def test_a_service_port_is_its_own(ws: Workstation) -> None:
    as_yolo(ws, write((SCRIPTS / "squat_port.py").read_text(), "/tmp/squat_port.py"))
    squat = "python -I /tmp/squat_port.py"
    # A session kills its JupyterLab and TensorBoard and tries their ports, 10 ms apart, for 5 s;
    # and sshd's (root's: it cannot kill that one) on IPv6, where sshd does not listen.
    for port, hosts, pattern in (
        (8888, "0.0.0.0,127.0.0.1,::", "[.]labserver"),
        (6006, "127.0.0.1,0.0.0.0,::", "[.]boardserver"),
        (2222, "::", ""),  # (1 s is plenty: nothing restarts)
    ):
        tried = json.loads(as_yolo(ws, f"{squat} {port} {hosts} 5 '{pattern}'"))
        assert tried["bound"] == [], (port, tried)
    # The browser's token reaches the real server again; everything healthy.
    running = {"jupyter": "running", "tensorboard": "running", "sshd": "running"}
    wait_until(lambda: {n: s["state"] for n, s in ws.services().items()} == running, timeout=90, interval=0.5)
    auth = {"Authorization": f"token {ws.token()}"}
    assert requests.get(f"{ws.jupyter}/api/status", headers=auth, timeout=10).status_code == 200
    wait_until(lambda: _health(ws) == "healthy", timeout=30, interval=0.5)
    # sshd dies (root kills it) and a session takes 2222 before it starts again: sshd is never
    # RUNNING and the box is unhealthy while the squatter holds the port; then sshd is back.
    cid = ws.compose("ps", "-q", "workstation").stdout.strip()
    release = "/tmp/squat-2222"
    ws.exec(f"rm -f {release} {release}.holding")
    squatter = [squat, "2222", "0.0.0.0", "20", "''", release]
    subprocess.run(["docker", "exec", "-d", "-u", "yolo", cid, "sh", "-c", " ".join(squatter)], check=True)
    ws.exec(f"kill -KILL {ws.services()['sshd']['pid']}")
    wait_until(
        lambda: ws.exec(f"cat {release}.holding 2>/dev/null; true") == "0.0.0.0", timeout=30, interval=0.1
    )
    seen = set()
    for _ in range(4):  # two seconds and more: sshd's restarts meet the squatter (at most 4 fail)
        seen |= {ws.services()["sshd"]["state"], _health(ws)}
        time.sleep(0.5)
    assert "running" not in seen and "healthy" not in seen, seen
    assert any(state.startswith("unhealthy: sshd is ") for state in seen), seen
    ws.exec(f"touch {release}")
    wait_until(lambda: ws.services()["sshd"]["state"] == "running", timeout=60, interval=0.5)
    wait_until(lambda: _health(ws) == "healthy", timeout=30, interval=0.5)
    assert as_yolo(ws, "echo in").strip() == "in"


def test_trusting_the_home_loads_what_the_user_added(
    ws: Workstation, planted: requests.Session, tmp_path: Path
) -> None:
    override = tmp_path / "trust-home.yaml"
    override.write_text('services:\n  workstation:\n    environment:\n      RIG_JUPYTER_TRUST_HOME: "1"\n')
    ws.overrides.append(override)
    try:
        up(ws)  # recreated with the setting; the volumes (and the plants) stay
        auth = {"Authorization": f"token {ws.token()}"}
        specs = requests.get(f"{ws.jupyter}/api/kernelspecs", headers=auth, timeout=10).json()["kernelspecs"]
        assert "planted" in specs, sorted(specs)
        assert "planted-ext" in requests.get(f"{ws.jupyter}/lab", headers=auth, timeout=30).text
        wait_until(
            lambda: {"rscript-ran.log", "server-ext-ran.log"} <= set(as_yolo(ws, "ls ~").split()), timeout=30
        )
    finally:
        ws.overrides.remove(override)
