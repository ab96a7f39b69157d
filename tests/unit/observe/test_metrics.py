"""rig's Prometheus metrics on the host: the node server over real HTTP, two rank processes writing
through prometheus-client's multiprocess mode, NVML from the fake module; the output parsed with
prometheus_client.parser and linted by Debian's `promtool check metrics`."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from rig.errors import RigError
from rig.observe.metrics import config, gpus, node, training

from tests.helpers import ENTRYPOINT, SCRIPTS
from tests.scripts.fake_nvml import FakeGpu, FakeNvml

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


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[node.NodeServer, dict[str, str]]]:
    """The node server on a free loopback port, as `rig train`'s launcher starts it; no GPU."""
    env = {config.NODE_ENV: "1", config.ADDR_ENV: "127.0.0.1", config.PORT_ENV: str(free_port())}
    server = node.serve_node(env, launcher=True, nvml_module=FakeNvml(init_error=9))
    assert server is not None
    try:
        yield server, env
    finally:
        server.close(env)


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


# ------------------------------------------------------------------------------------- the contract
@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, config.Endpoint("0.0.0.0", 9464)),
        ({"RIG_METRICS_PORT": " 9100 ", "RIG_METRICS_ADDR": "127.0.0.1"}, config.Endpoint("127.0.0.1", 9100)),
        ({"RIG_METRICS_PORT": "0"}, None),
        ({"RIG_METRICS_PORT": ""}, config.Endpoint("0.0.0.0", 9464)),
    ],
)
def test_endpoint_from_the_environment(env: dict[str, str], expected: config.Endpoint | None) -> None:
    assert config.endpoint(env) == expected


@pytest.mark.parametrize("raw", ["abc", "-1", "65536", "9464.0", "0x10"])
def test_a_port_that_is_none_is_one_line(raw: str) -> None:
    with pytest.raises(
        RigError, match=rf"RIG_METRICS_PORT='{raw}' is not a TCP port; use 1-65535.*0 to serve"
    ):
        config.endpoint({"RIG_METRICS_PORT": raw})


@pytest.mark.parametrize(
    ("env", "launcher", "serves"),
    [
        ({"RIG_METRICS_NODE": "1"}, True, True),
        ({"RIG_METRICS_NODE": "1", "LOCAL_RANK": "0"}, True, True),
        ({"RIG_METRICS_NODE": "1"}, False, True),  # the trainer alone (device=cpu)
        ({"RIG_METRICS_NODE": "1", "LOCAL_RANK": "0"}, False, False),  # a rank: the launcher serves
        ({}, True, False),  # rig launch's programs: not rig train
        ({"RIG_METRICS_NODE": "0"}, True, False),
    ],
)
def test_who_serves_the_node(env: dict[str, str], launcher: bool, serves: bool) -> None:
    assert config.serves_node(env, launcher=launcher) is serves


def test_a_foreign_multiprocess_directory_is_not_published_to() -> None:
    assert config.publish_dir({config.MULTIPROC_ENV: "/theirs"}) is None
    assert config.publish_dir(config.publish_env("/ours")) == "/ours"


# ------------------------------------------------------------------------------------ the decisions
@pytest.mark.parametrize(
    ("args", "ratio", "eta"),
    [
        ((0, 0, 10, 4, 0, 0.0), 0.0, None),
        ((0, 5, 10, 4, 0, 30.0), 0.125, 210.0),  # half an epoch in 30 s: 3.5 epochs left at 60 s
        ((3, 10, 10, 4, 0, 240.0), 1.0, 0.0),
        ((2, 5, 10, 4, 2, 30.0), 0.625, 90.0),  # resumed at epoch 3: its pace is this session's
        ((9, 10, 10, 4, 0, 1.0), 1.0, 0.0),  # epochs shrunk by time=: never above 1, never negative
    ],
)
def test_progress_and_eta(
    args: tuple[int, int, int, int, int, float], ratio: float, eta: float | None
) -> None:
    p = training.progress(*args)
    assert p.ratio == pytest.approx(ratio)
    assert p.eta_s == (None if eta is None else pytest.approx(eta))


def test_the_last_batch_of_a_shard_counts_what_is_left() -> None:
    assert [training.images_in_batch(4, 10, seen) for seen in (0, 4, 8)] == [4, 4, 2]
    assert training.images_in_batch(4, None, 8) == 4


# -------------------------------------------------------------------------------- the node's server
def test_two_ranks_publish_to_one_node_server(served: tuple[node.NodeServer, dict[str, str]]) -> None:
    server, env = served
    run_ranks(env, ranks=2, epochs=2, shard=10, batch=4)
    text = scrape(server.port)
    for rank in ("0", "1"):
        assert value(text, "yolo_train_images_total", rank=rank) == 20  # 4+4+2 per epoch, 2 epochs
        assert value(text, "yolo_train_batch_duration_seconds_count", rank=rank) == 6
        batch_s = value(text, "yolo_train_batch_duration_seconds_sum", rank=rank)
        wait_s = value(text, "yolo_train_dataloader_wait_seconds_total", rank=rank)
        assert 6 * 0.002 <= wait_s < batch_s and batch_s >= 6 * 0.005
    families = text_string_to_metric_families(text)
    info = [s for f in families if f.name == "yolo_train_info" for s in f.samples]
    assert [s.labels for s in info] == [
        {"run": "train-7", "model": "yolo11n.pt", "data": "coco8.yaml", "stack": "",
         "ultralytics_version": "", "world_size": "2"}
    ]  # fmt: skip
    assert (value(text, "yolo_train_epoch"), value(text, "yolo_train_epochs")) == (2, 2)
    assert (value(text, "yolo_train_progress_ratio"), value(text, "yolo_train_eta_seconds")) == (1, 0)
    assert value(text, "yolo_train_loss", component="box") == pytest.approx(1.3)
    assert value(text, "yolo_train_learning_rate", param_group="1") == 0.02
    assert (value(text, "yolo_val_map50"), value(text, "yolo_val_map50_95")) == (0.5, 0.25)
    assert (value(text, "yolo_val_precision"), value(text, "yolo_val_recall")) == (0.75, 0.625)
    assert value(text, "yolo_train_last_checkpoint_timestamp_seconds") > 1.7e9
    # Rank 0 alone publishes the run's series: one sample each, not one per rank.
    assert sum(n == "yolo_train_epoch" for n, _ in samples(text)) == 1
    assert not any(n.startswith(("DCGM_", "rig_gpu_")) for n, _ in samples(text))
    assert promtool(text) == ""


def test_a_trainer_alone_serves_and_publishes_itself() -> None:
    # device=cpu in one process: no torchrun, no LOCAL_RANK; it serves its own values.
    port = free_port()
    env = {config.NODE_ENV: "1", config.ADDR_ENV: "127.0.0.1", config.PORT_ENV: str(port), "RANK": "0"}
    env.update({"RIG_RUN_GPUS": ""})  # no GPU of the host's in this run
    proc = rank_process(env, epochs=1, shard=10, batch=4)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("INFO metrics: http://127.0.0.1:"), line
        assert proc.stdout.readline() == "done\n"
        text = scrape(port)
    finally:
        out, _ = proc.communicate("", timeout=60)
    assert proc.returncode == 0, out
    assert value(text, "yolo_train_images_total", rank="0") == 10
    assert (value(text, "yolo_train_progress_ratio"), value(text, "yolo_train_epochs")) == (1, 1)
    assert promtool(text) == ""


def test_serving_and_closing_leave_nothing_behind(served: tuple[node.NodeServer, dict[str, str]]) -> None:
    server, env = served
    directory = Path(server.directory)
    assert env[config.MULTIPROC_ENV] == env[config.DIR_ENV] == str(directory)
    assert directory.is_dir() and oct(directory.stat().st_mode & 0o777) == "0o700"
    assert scrape(server.port) == ""  # nothing published yet: an empty exposition, no error
    server.close(env)
    assert not directory.exists() and config.MULTIPROC_ENV not in env
    with pytest.raises(OSError):
        scrape(server.port)


def test_a_taken_port_is_one_warning_and_the_run_goes_on(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {config.NODE_ENV: "1", config.ADDR_ENV: "127.0.0.1", config.PORT_ENV: str(port)}
        assert node.serve_node(env, launcher=True, nvml_module=FakeNvml(init_error=9)) is None
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"WARNING metrics: /metrics not served: cannot listen on 127.0.0.1:{port}"
    )
    assert "the run goes on" in lines[0] and "RIG_METRICS_PORT" in lines[0]
    assert config.MULTIPROC_ENV not in env  # the ranks publish nowhere


def test_port_zero_and_ranks_serve_nothing() -> None:
    assert node.serve_node({config.NODE_ENV: "1", config.PORT_ENV: "0"}, launcher=True) is None
    assert node.serve_node({config.NODE_ENV: "1", "LOCAL_RANK": "1"}, launcher=False) is None


# ---------------------------------------------------------------------------------------- the GPUs
def gpu_text(module: FakeNvml, env: dict[str, str]) -> str:
    from prometheus_client import CollectorRegistry, generate_latest

    collector = gpus.GpuCollector.open(env, module)
    assert collector is not None
    registry = CollectorRegistry()
    registry.register(collector)
    try:
        return str(generate_latest(registry).decode())
    finally:
        collector.close()


def test_gpu_gauges_have_dcgm_exporters_names_units_and_labels() -> None:
    env = {"RIG_RUN_GPUS": "0=0000:17:00.0,1=0000:18:00.0", "NODE_NAME": "node-7"}
    text = gpu_text(FakeNvml([H200, A100]), env)
    labels = {"gpu": "0", "UUID": "GPU-abc", "pci_bus_id": "00000000:17:00.0", "device": "nvidia3",
              "modelName": "NVIDIA H200", "Hostname": "node-7"}  # fmt: skip
    got = {n: v for (n, ls), v in samples(text).items() if dict(ls) == labels}
    assert got == {
        "DCGM_FI_DEV_GPU_UTIL": 87, "DCGM_FI_DEV_FB_USED": 3072, "DCGM_FI_DEV_FB_FREE": 141 * 1024 - 3072,
        "DCGM_FI_DEV_POWER_USAGE": 300, "DCGM_FI_DEV_GPU_TEMP": 40, "DCGM_FI_DEV_SM_CLOCK": 1980,
        "DCGM_FI_DEV_MEM_CLOCK": 3201,
        # GPM, between the collector's first sample and this scrape's: ratios, rig's names.
        "rig_gpu_sm_active_ratio": 0.75, "rig_gpu_tensor_active_ratio": 0.4,
        "rig_gpu_dram_active_ratio": 0.125,
    }  # fmt: skip
    a100 = {n for (n, ls), _ in samples(text).items() if dict(ls).get("gpu") == "1"}
    assert "DCGM_FI_DEV_GPU_UTIL" in a100
    assert "DCGM_FI_DEV_POWER_USAGE" not in a100  # NotSupported: no sample rather than a made-up 0
    assert not any(n.startswith("rig_gpu_") for n in a100)  # no GPM before Hopper
    assert "DCGM_FI_PROF" not in text


def test_gpm_samples_are_freed() -> None:
    module = FakeNvml([H200])
    for _ in range(3):
        gpu_text(module, {})
    assert module.gpm_samples == 0


def test_only_the_runs_gpus_and_the_slurm_job() -> None:
    text = gpu_text(FakeNvml([H200, A100]), {"RIG_RUN_GPUS": "1=0000:18:00.0", "SLURM_JOB_ID": "4242"})
    gpus_seen = {dict(ls)["gpu"] for (n, ls), _ in samples(text).items() if n == "DCGM_FI_DEV_GPU_UTIL"}
    assert gpus_seen == {"1"}
    assert {dict(ls).get("hpc_job") for (n, ls), _ in samples(text).items()} == {"4242"}
    # promtool finds dcgm-exporter's own camelCase label (modelName) and nothing else.
    problems = {line.split(" ", 1)[1] for line in promtool(text).splitlines()}
    assert problems == {"label names should be written in 'snake_case' not 'camelCase'"}


@pytest.mark.parametrize("module", [FakeNvml(init_error=9), FakeNvml([])])
def test_no_gpu_no_series_no_error(module: Any, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="rig"):
        assert gpus.GpuCollector.open({}, module) is None
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_gpu_lost_mid_run_drops_the_gpu_series_not_the_scrape() -> None:
    collector = gpus.GpuCollector.open({}, FakeNvml([H200], fail_after=0))
    assert collector is not None
    assert list(collector.collect()) == []
    collector.close()


# ------------------------------------------------------------------------------------- rig train
def test_rig_train_asks_its_launcher_to_serve(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rig import cli

    argv = ["train", "--dry-run", "device=cpu", "data=x.yaml", "model=m.yaml", f"project={tmp_path}"]
    assert cli.main(argv) == 0
    assert "RIG_METRICS_NODE=1" in capsys.readouterr().out.split()


def test_rig_train_with_a_bad_port_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rig import cli

    monkeypatch.setenv("RIG_METRICS_PORT", "99999")
    monkeypatch.setattr(os, "execvpe", lambda *a: pytest.fail("launched"))
    assert cli.main(["train", "device=cpu", "data=x.yaml", "model=m.yaml", f"project={tmp_path}"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["ERROR rig: RIG_METRICS_PORT='99999' is not a TCP port; use 1-65535 (default 9464), "
                   "or 0 to serve no metrics"]  # fmt: skip
    assert not list(tmp_path.iterdir())


# --------------------------------------------------------------------------------- where it is served
def test_compose_publishes_metrics_on_the_hosts_loopback_only() -> None:
    import yaml

    from tests.helpers import REPO

    ports = yaml.safe_load((REPO / "compose.yaml").read_text())["services"]["workstation"]["ports"]
    assert [p for p in ports if p.endswith(":9464")] == ["127.0.0.1:${METRICS_PORT:-9464}:9464"]


def test_the_pytorchjob_declares_the_port_and_the_scrape_annotations() -> None:
    import yaml

    from tests.helpers import REPO

    job = yaml.safe_load((REPO / "deploy/pytorchjob.yaml").read_text())
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        pod = replica["template"]
        assert pod["metadata"]["annotations"] == {
            "prometheus.io/scrape": "true", "prometheus.io/port": "9464", "prometheus.io/path": "/metrics",
        }  # fmt: skip
        assert {"name": "metrics", "containerPort": 9464} in pod["spec"]["containers"][0]["ports"]
