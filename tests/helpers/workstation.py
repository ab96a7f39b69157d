"""The workstation under test: a compose project with its own ports, SSH key and volumes, and its clients."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.helpers import REPO, SCRIPTS
from tests.helpers.compose import take_down
from tests.helpers.containers import IMAGE, free_port
from tests.helpers.names import unique
from tests.helpers.waiting import wait_until


@dataclass
class Workstation:
    project: str
    tmp: Path
    key: Path
    env: dict[str, str]
    started_at: float = 0.0
    ready_after: float = 0.0
    overrides: list[Path] = field(default_factory=list)

    @property
    def ssh_port(self) -> int:
        return int(self.env["SSH_PORT"])

    @property
    def jupyter(self) -> str:
        return f"http://127.0.0.1:{self.env['JUPYTER_PORT']}"

    def files(self) -> list[str]:
        """compose's `-f FILE` arguments: the repository's files and the test's overrides."""
        files = ["-f", str(REPO / "compose.yaml"), "-f", str(REPO / "compose.cpu.yaml")]
        for o in self.overrides:
            files += ["-f", str(o)]
        return files

    def compose(
        self, *args: str, timeout: int = 120, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["docker", "compose", "-p", self.project, *self.files(), *args],
            env={**os.environ, **self.env},
            cwd=REPO,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
        )

    def exec(self, script: str, timeout: int = 60) -> str:
        return self.compose("exec", "-T", "workstation", "timeout", str(timeout), "bash", "-c", script).stdout

    def logs(self) -> str:
        # `docker logs`, not `compose logs`: the latter decorates lines with terminal escapes.
        cid = self.compose("ps", "-a", "-q", "workstation").stdout.strip()
        out = subprocess.run(["docker", "logs", cid], capture_output=True, text=True, timeout=30, check=True)
        return out.stdout + out.stderr

    def ssh_argv(self, user: str = "yolo", password: bool = False) -> list[str]:
        argv = ["ssh", "-p", str(self.ssh_port), "-o", "StrictHostKeyChecking=no", "-o", "LogLevel=ERROR"]
        argv += ["-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=5"]
        if password:
            argv += ["-o", "PreferredAuthentications=password", "-o", "PubkeyAuthentication=no"]
            argv += ["-o", "NumberOfPasswordPrompts=1"]
        else:
            argv += ["-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-i", str(self.key)]
        return [*argv, f"{user}@127.0.0.1"]

    def ssh(
        self, command: str, user: str = "yolo", password: str | None = None, timeout: int = 30
    ) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ)
        if password is not None:
            # OpenSSH >= 8.4 reads the password from SSH_ASKPASS when forced: no sshpass needed.
            askpass = self.tmp / "askpass.sh"
            askpass.write_text('#!/bin/sh\nprintf "%s\\n" "$RIG_TEST_PASSWORD"\n')
            askpass.chmod(0o700)
            env.update(SSH_ASKPASS=str(askpass), SSH_ASKPASS_REQUIRE="force", RIG_TEST_PASSWORD=password)
        return subprocess.run(
            [*self.ssh_argv(user, password is not None), command],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def token(self) -> str:
        """The generated Jupyter token of this start, from `rig serve`'s root-only note for `make up`."""
        # Before issue 26 the token was kept in the state volume: also read there, to run a test
        # against an older image and watch it fail for the right reason.
        urls = self.exec("cat /run/rig/urls 2>/dev/null || echo token=$(cat /var/lib/rig/jupyter_token)")
        match = re.search(r"token=(\w+)", urls)
        assert match, urls
        return match[1]

    def services(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.exec("cat /run/rig/services.json"))
        return data

    def host_key(self) -> str:
        out = subprocess.run(
            ["ssh-keyscan", "-p", str(self.ssh_port), "-t", "ed25519", "127.0.0.1"],
            capture_output=True,
            text=True,
            timeout=15,
            check=True,
        ).stdout
        return out.split()[-1]

    def answers(self) -> bool:
        if self.ssh("true", timeout=10).returncode != 0:
            return False
        return requests.get(f"{self.jupyter}/api", timeout=2).status_code == 200


def start(project_prefix: str, tmp: Path, **env: str) -> Workstation:
    if shutil.which("ssh") is None or shutil.which("docker") is None:
        pytest.skip("needs the OpenSSH client and docker")
    key = tmp / "id_ed25519"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    ws = Workstation(
        project=unique(project_prefix),
        tmp=tmp,
        key=key,
        env={
            "IMAGE": IMAGE,
            "SSH_PUBLIC_KEY": key.with_suffix(".pub").read_text().strip(),
            "SSH_PORT": str(free_port()),
            "JUPYTER_PORT": str(free_port()),
            "METRICS_PORT": str(free_port()),
            **env,
        },
    )
    return ws


def up(ws: Workstation) -> None:
    ws.started_at = time.monotonic()
    ws.compose("up", "-d")
    wait_until(ws.answers, timeout=90, interval=0.2)
    ws.ready_after = time.monotonic() - ws.started_at


def down(ws: Workstation, stop_s: int = 30) -> None:
    """The workstation gone with its volumes and network (tests/helpers/compose.py's take_down)."""
    take_down(ws.project, *ws.files(), env=ws.env, stop_s=stop_s)


@contextlib.contextmanager
def running(ws: Workstation, stop_s: int = 30) -> Iterator[Workstation]:
    """The workstation up for the block, and down with its volumes after it, also when it fails."""
    try:
        up(ws)
        yield ws
    finally:
        down(ws, stop_s)


def as_yolo(ws: Workstation, script: str, timeout: int = 60) -> str:
    """What script prints, run by yolo over SSH; it must succeed."""
    result = ws.ssh(script, timeout=timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def restart(ws: Workstation) -> str:
    """Restart the container as its user may; return the log of the new start only."""
    since = ws.exec("date -u +%Y-%m-%dT%H:%M:%S.%NZ").strip()
    ws.compose("restart", "-t", "30", "workstation", timeout=180)
    wait_until(ws.answers, timeout=120, interval=0.3)
    cid = ws.compose("ps", "-q", "workstation").stdout.strip()
    out = subprocess.run(
        ["docker", "logs", "--since", since, cid], capture_output=True, text=True, check=True
    )
    log = out.stdout + out.stderr
    # The window also holds the old instance's stop (a kernel restarting then may print a traceback);
    # its last line is "INFO serve: stopped".
    marker = "INFO serve: stopped\n"
    return log.rsplit(marker, 1)[-1] if marker in log else log


# Runs inside the container: starts a kernel through the REST API and sends it one cell over the
# kernel websocket; waits for the reply (printing the cell's output after OUTPUT:), or only for the
# cell to start when argv[2] is "start". argv[3], if given, is the token (else the generated one).
KERNEL_CELL = (SCRIPTS / "kernel_cell.py").read_text()


# Runs inside the container: opens a Jupyter terminal and types argv[1] into it. With argv[2], a
# regular expression, it prints what the terminal shows once that matches (RESULT_LINE matches the
# output of ENV_PROBE, not the echo of what was typed); without it, it leaves at once (the terminal
# and its job stay, as when a browser tab is closed). argv[3], if given, is the token (else the
# generated one).
TERMINAL = (SCRIPTS / "jupyter_terminal.py").read_text()

# What a terminal sees, for TERMINAL: echo "R""ESULT@@...@@" prints RESULT@@...@@.
ENV_PROBE = 'echo "R""ESULT@@$(command -v python)@@$NVIDIA_VISIBLE_DEVICES@@$RIG_QUOTES@@$(id -un)@@"'
RESULT_LINE = r"RESULT@@.*@@\r?\n"
