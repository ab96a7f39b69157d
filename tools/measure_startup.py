#!/usr/bin/env python3
"""Seconds from `docker compose up -d` to SSH (a real key login) and JupyterLab (/api/status with
the token) both answering. Each run uses a fresh compose project and fresh volumes, so the host
keys and the token are generated in the measured time too.

    python3 tools/measure_startup.py [--runs 3] [--cpu]     # IMAGE=yolo-rig:cu121 by default

Prints one line per run and the median; needs docker compose and the OpenSSH client.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ssh_ok(key: Path, port: int) -> bool:
    argv = ["ssh", "-p", str(port), "-i", str(key), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes"]
    argv += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=QUIET"]
    argv += ["-o", "ConnectTimeout=2", "yolo@127.0.0.1", "true"]
    return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=10).returncode == 0


def jupyter_ok(port: int, token: str) -> bool:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/status", headers={"Authorization": f"token {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def one_run(files: list[str], key: Path, timeout: float) -> float:
    ssh_port, jupyter_port = free_port(), free_port()
    token = uuid.uuid4().hex
    project = f"rig-measure-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "IMAGE": os.environ.get("IMAGE", "yolo-rig:cu121"),
        "SSH_PUBLIC_KEY": key.with_suffix(".pub").read_text().strip(),
        "JUPYTER_TOKEN": token,
        "SSH_PORT": str(ssh_port),
        "JUPYTER_PORT": str(jupyter_port),
    }
    compose = ["docker", "compose", "-p", project, *files]
    try:
        started = time.monotonic()
        subprocess.run([*compose, "up", "-d"], env=env, cwd=ROOT, check=True, capture_output=True)
        ssh_at = jupyter_at = None
        while (ssh_at is None or jupyter_at is None) and time.monotonic() - started < timeout:
            if jupyter_at is None and jupyter_ok(jupyter_port, token):
                jupyter_at = time.monotonic() - started
            if ssh_at is None and ssh_ok(key, ssh_port):
                ssh_at = time.monotonic() - started
            time.sleep(0.05)
        if ssh_at is None or jupyter_at is None:
            raise SystemExit(
                f"ERROR measure: not answering after {timeout:.0f} s (ssh {ssh_at}, jupyter {jupyter_at})"
            )
        both = max(ssh_at, jupyter_at)
        print(f"run {project}: ssh {ssh_at:.2f} s, jupyter {jupyter_at:.2f} s, both {both:.2f} s", flush=True)
        return both
    finally:
        subprocess.run([*compose, "down", "-v", "-t", "20"], env=env, cwd=ROOT, capture_output=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cpu", action="store_true", help="add compose.cpu.yaml (no NVIDIA runtime)")
    parser.add_argument("--timeout", type=float, default=120)
    args = parser.parse_args()
    files = ["-f", "compose.yaml"] + (["-f", "compose.cpu.yaml"] if args.cpu else [])
    with tempfile.TemporaryDirectory() as d:
        key = Path(d) / "id"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        results = [one_run(files, key, args.timeout) for _ in range(args.runs)]
    print(
        f"median of {len(results)}: {statistics.median(results):.2f} s, `up -d` to SSH and Jupyter answering"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
