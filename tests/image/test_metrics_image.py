"""`rig train`'s /metrics in the built image, read by real clients: Debian's Prometheus 2.42 on the
host's loopback scraping a CPU run every second with the run's bearer token (RIG_METRICS_TOKEN_FILE,
Prometheus' `credentials_file`), and `promtool check metrics` on a live scrape."""

from __future__ import annotations

import contextlib
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.containers import Containers, free_port
from tests.helpers.waiting import wait_until

pytestmark = [pytest.mark.image, pytest.mark.slow]

DEMO = "rig demo-data /tmp/demo --train 32 --val 4 --imgsz 64 >/dev/null 2>&1 && cd /tmp && "
TRAIN = (
    "rig train data=/tmp/demo/data.yaml model=yolo11n.yaml imgsz=64 batch=4 workers=0 device=cpu "
    "plots=False project=/tmp/runs name=m"
)
# Every series a CPU run has (no GPU: no DCGM_* or rig_gpu_*).
CPU_SERIES = {
    "yolo_train_info", "yolo_train_epoch", "yolo_train_epochs", "yolo_train_progress_ratio",
    "yolo_train_eta_seconds", "yolo_train_images_total", "yolo_train_batch_duration_seconds_bucket",
    "yolo_train_batch_duration_seconds_sum", "yolo_train_batch_duration_seconds_count",
    "yolo_train_dataloader_wait_seconds_total", "yolo_train_loss", "yolo_train_learning_rate",
    "yolo_val_map50", "yolo_val_map50_95", "yolo_val_precision", "yolo_val_recall",
    "yolo_train_last_checkpoint_timestamp_seconds",
}  # fmt: skip


@contextlib.contextmanager
def prometheus(tmp: Path, target: str, token_file: Path | None = None) -> Iterator[str]:
    """Debian's Prometheus on a free loopback port, scraping target every second (sending the bearer
    token in token_file, if given); its API's URL."""
    exe = shutil.which("prometheus")
    assert exe, "no prometheus on this host: .ci/provision.sh installs Debian's"
    port = free_port()
    config = tmp / "prometheus.yml"
    auth = f"authorization: {{credentials_file: '{token_file}'}}, " if token_file else ""
    config.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
        f"scrape_configs: [{{job_name: rig, {auth}static_configs: [{{targets: ['{target}']}}]}}]\n"
    )
    log = (tmp / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [exe, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: requests.get(f"{url}/-/ready", timeout=5).ok, timeout=120, interval=0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def query(url: str, promql: str) -> list[dict[str, Any]]:
    r = requests.get(f"{url}/api/v1/query", params={"query": promql}, timeout=30)
    r.raise_for_status()
    return list(r.json()["data"]["result"])


def stored_names(url: str, match: str) -> set[str]:
    r = requests.get(f"{url}/api/v1/series", params={"match[]": match}, timeout=30)
    r.raise_for_status()
    return {s["__name__"] for s in r.json()["data"]}


def scrape(port: int, token: str = "") -> str:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    r = requests.get(f"http://127.0.0.1:{port}/metrics", headers=headers, timeout=10)
    r.raise_for_status()
    return r.text


def promtool(text: str) -> str:
    exe = shutil.which("promtool")
    assert exe, "no promtool on this host: .ci/provision.sh installs Debian's prometheus"
    done = subprocess.run([exe, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    return (done.stdout + done.stderr).strip()


def validated(text: str) -> str | None:
    return text if "\nyolo_val_map50 " in text else None


def names(text: str) -> set[str]:
    return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}


def start_run(containers: Containers, command: str, host_port: int, volumes: Any = None, **env: str) -> Any:
    return containers.run(
        ["bash", "-c", DEMO + command],
        ports={"9464/tcp": ("127.0.0.1", host_port)},
        shm_size="1g",
        environment=env,
        volumes=volumes or {},
    )


def live(container: Any, scrape_check: Any) -> Any:
    """scrape_check's value while the run goes on; the test fails at once when the run has ended."""
    try:
        value = scrape_check()
    except requests.RequestException:  # not serving yet
        value = None
    if value is None:
        container.reload()
        if container.status == "exited":
            pytest.fail("the run ended before /metrics showed it: " + container.logs().decode()[-3000:])
    return value


def finish(container: Any, timeout: int = 600) -> tuple[int, str]:
    status = container.wait(timeout=timeout)
    return int(status["StatusCode"]), container.logs().decode(errors="replace")


def test_a_cpu_run_is_scraped_by_prometheus(containers: Containers, tmp_path: Path) -> None:
    port = free_port()
    token = secrets.token_hex(16)
    token_file = tmp_path / "metrics-token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o644)
    with prometheus(tmp_path, f"127.0.0.1:{port}", token_file) as url:
        c = start_run(
            containers, f"{TRAIN} epochs=3", port,
            volumes={str(token_file): {"bind": "/run/secrets/metrics-token", "mode": "ro"}},
            RIG_METRICS_TOKEN_FILE="/run/secrets/metrics-token",
        )  # fmt: skip
        # Live, once validation has run: every series a CPU run has, and promtool finds nothing.
        text = wait_until(lambda: live(c, lambda: validated(scrape(port, token))), timeout=600, interval=0.5)
        assert names(text) >= CPU_SERIES, CPU_SERIES - names(text)
        assert promtool(text) == ""
        unauthorized = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert unauthorized.status_code == 401 and "yolo_" not in unauthorized.text
        rc, logs = finish(c)
        assert rc == 0, logs[-3000:]
        assert (
            "INFO metrics: http://0.0.0.0:9464/metrics for this node's ranks (RIG_METRICS_PORT=0 turns it "
            "off), to requests with the bearer token of RIG_METRICS_TOKEN_FILE"
        ) in logs
        assert not [line for line in logs.splitlines() if line.startswith(("WARNING metrics", "ERROR"))]
        # What Prometheus stored, through its HTTP API.
        assert stored_names(url, '{__name__=~"yolo_.*"}') >= CPU_SERIES
        assert stored_names(url, '{__name__=~"DCGM_.*|rig_gpu_.*"}') == set()
        images = query(url, "max_over_time(yolo_train_images_total[1h])")
        assert [r["metric"]["rank"] for r in images] == ["0"]
        assert 0 < float(images[0]["value"][1]) <= 3 * 32
        batches = query(url, "max_over_time(yolo_train_batch_duration_seconds_count[1h])")
        assert 0 < float(batches[0]["value"][1]) <= 3 * 8
        wait = query(url, "max_over_time(yolo_train_dataloader_wait_seconds_total[1h])")
        assert float(wait[0]["value"][1]) > 0
        info = query(url, "max_over_time(yolo_train_info[1h])")[0]["metric"]
        assert (info["run"], info["model"], info["data"], info["world_size"]) == (
            "m", "yolo11n.yaml", "data.yaml", "1",
        )  # fmt: skip
        assert info["stack"] and info["ultralytics_version"]
        assert float(query(url, "max_over_time(yolo_train_epochs[1h])")[0]["value"][1]) == 3
        assert float(query(url, "max_over_time(up[1h])")[0]["value"][1]) == 1


def test_a_taken_port_is_one_warning_and_the_run_goes_on(containers: Containers) -> None:
    hold = (
        'python3 -c \'import socket,time; s=socket.socket(); s.bind(("0.0.0.0", 9464)); s.listen(); '
        "time.sleep(900)' & "
    )
    c = start_run(containers, f"{hold}sleep 2; {TRAIN} epochs=1", free_port())
    rc, logs = finish(c)
    assert rc == 0, logs[-3000:]
    warnings = [line for line in logs.splitlines() if line.startswith("WARNING metrics")]
    assert len(warnings) == 1 and "cannot listen on 0.0.0.0:9464" in warnings[0], logs[-3000:]
    assert "INFO metrics: http" not in logs


def test_port_zero_serves_nothing(containers: Containers) -> None:
    c = start_run(containers, f"{TRAIN} epochs=1", free_port(), RIG_METRICS_PORT="0")
    rc, logs = finish(c)
    assert rc == 0, logs[-3000:]
    assert "metrics" not in "\n".join(line for line in logs.splitlines() if line.startswith(("INFO", "WARN")))


def both_ranks(text: str) -> str | None:
    ranks = {
        s.labels.get("rank")
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "yolo_train_images_total" and s.value > 0
    }
    return text if ranks == {"0", "1"} and "\nyolo_train_epoch " in text else None


def test_cpu_ranks_publish_to_one_server_per_node(containers: Containers) -> None:
    port = free_port()
    c = start_run(containers, f"{TRAIN} epochs=2 --cpu-ranks 2", port)
    text = wait_until(lambda: live(c, lambda: both_ranks(scrape(port))), timeout=600, interval=0.5)
    for series in ("yolo_train_batch_duration_seconds_count", "yolo_train_dataloader_wait_seconds_total"):
        assert {s.labels["rank"] for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == series} == {"0", "1"}  # fmt: skip
    run_series = [
        s for f in text_string_to_metric_families(text) for s in f.samples if s.name == "yolo_train_info"
    ]
    assert [s.labels["world_size"] for s in run_series] == ["2"]  # rank 0's alone
    assert promtool(text) == ""
    rc, logs = finish(c)
    assert rc == 0, logs[-3000:]
    # torchrun's launcher serves: one server line for the node, none from the ranks.
    assert logs.count("INFO metrics: http://0.0.0.0:9464/metrics for this node's ranks") == 1
    assert "WARNING metrics" not in logs
