"""rig.instrument.metrics.node: the node server over real HTTP, two rank processes writing through
prometheus-client's multiprocess mode, NVML from the fake module; the output parsed with
prometheus_client.parser and linted by Debian's `promtool check metrics`."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from rig.instrument.metrics import config, node

from tests.helpers.metrics import free_port, promtool, rank_process, run_ranks, samples, scrape, value
from tests.scripts.fake_nvml import FakeNvml


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
    assert err == ["ERROR rig: RIG_METRICS_PORT='99999': use a whole number between 0 and 65535 "
                   "(default 9464); the TCP port of the node's /metrics, 0 to serve none"]  # fmt: skip
    assert not list(tmp_path.iterdir())


def test_rig_train_with_an_unreadable_token_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rig import cli

    monkeypatch.setenv("RIG_METRICS_TOKEN_FILE", str(tmp_path / "missing"))
    monkeypatch.setattr(os, "execvpe", lambda *a: pytest.fail("launched"))
    runs = tmp_path / "runs"
    assert cli.main(["train", "device=cpu", "data=x.yaml", "model=m.yaml", f"project={runs}"]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("INFO")]
    assert len(err) == 1 and err[0].startswith(
        f"ERROR rig: RIG_METRICS_TOKEN_FILE={tmp_path / 'missing'}: "
    ), err
    assert not runs.exists()
