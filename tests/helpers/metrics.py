"""What the metrics tests share: two fake GPUs, a scrape, its samples, promtool's lint, rank processes
writing through prometheus-client's multiprocess mode."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import ENTRYPOINT, SCRIPTS
from tests.scripts.fake_nvml import FakeGpu

H200 = FakeGpu(
    uuid="GPU-abc", bus_id="00000000:17:00.0", utils=[87], mem_used=[3 << 30], minor=3,
    gpm={2: 75.0, 5: 40.0, 10: 12.5},
)  # fmt: skip
A100 = FakeGpu(name="NVIDIA A100-SXM4-80GB", uuid="GPU-def", bus_id="00000000:18:00.0", power_mw=None)


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return str(r.read().decode())


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value, for every sample of the exposition."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def value(text: str, name: str, **labels: str) -> float:
    found = [v for (n, ls), v in samples(text).items() if n == name and dict(ls).items() >= labels.items()]
    assert len(found) == 1, f"{name}{labels}: {len(found)} samples in\n{text}"
    return found[0]


def promtool(text: str) -> str:
    exe = shutil.which("promtool")
    assert exe, "promtool is missing: .ci/provision.sh installs Debian's prometheus"
    done = subprocess.run([exe, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    return (done.stdout + done.stderr).strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_process(env: dict[str, str], epochs: int, shard: int, batch: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(SCRIPTS / "metrics_rank.py"), str(epochs), str(shard), str(batch)],
        env={**os.environ, **env, "PYTHONPATH": str(ENTRYPOINT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def run_ranks(env: dict[str, str], ranks: int, epochs: int, shard: int, batch: int) -> None:
    procs = [
        rank_process({**env, "RANK": str(r), "LOCAL_RANK": str(r)}, epochs, shard, batch)
        for r in range(ranks)
    ]
    for p in procs:
        out, _ = p.communicate("", timeout=120)
        assert p.returncode == 0 and "done" in out and "failed" not in out, out
