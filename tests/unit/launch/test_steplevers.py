"""The step's levers (channels_last, CUDA graphs, fused optimizer kernels): decided from `rig bench`'s
record as a table (rig.launch.steplevers.decide), the records on disk (hostile files included), then
through `rig train --dry-run` on a fake /sys with a fake NVML, where the lines are logged and the
trainer's arguments and environment printed."""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from pathlib import Path

import pytest
from rig import cli
from rig.launch import steplevers
from rig.launch.steplevers import LeverKey, LeverRecord, Measured

from tests.helpers.dryrun import dry_run
from tests.helpers.fakesys import FakeSys, bus
from tests.scripts.fake_nvml import FakeGpu, FakeNvml

KEY = LeverKey("NVIDIA H200", "2.11.0+cu130", "yolo11n", 640, 64, True)


def _record(*measured: Measured, key: LeverKey = KEY, eager: float = 700.0) -> LeverRecord:
    return LeverRecord(key, eager, measured, "2026-12-01T21:00Z", 50)


GOOD = Measured("channels_last", 1.20, True, 0.001, 0.01)
SLOWER = Measured("channels_last", 0.90, True, 0.001, 0.01)
DRIFTED = Measured("fused_optimizer", 1.30, False, 0.05, 0.01)
FUSED = Measured("fused_optimizer", 1.10, True, 0.0, 0.01)
GRAPHS = Measured("cuda_graphs", 1.50, True, 0.002, 0.01, setup_s=100.0)
TINY = Measured("fused_optimizer", 1.01, True, 0.0, 0.01)


def _decide(
    record: LeverRecord | None, args: dict[str, str] | None = None, **kw: object
) -> steplevers.StepLevers:
    options: dict[str, object] = {"key": KEY, "cpu": False, "run_steps": 100_000, **kw}
    return steplevers.decide({"epochs": "3", **(args or {})}, record, **options)  # type: ignore[arg-type]


def _states(decided: steplevers.StepLevers) -> dict[str, bool | None]:
    return {c.name: c.on for c in decided.choices}


def test_without_a_record_ultralytics_defaults_stay_and_the_line_says_how_to_measure() -> None:
    decided = _decide(None)
    assert decided.args == {"epochs": "3"} and decided.env == {}
    [choice] = decided.choices
    assert choice.on is None and choice.name == "channels_last, cuda_graphs, fused_optimizer"
    assert "not measured for yolo11n at 640 px, batch 64 on NVIDIA H200 (torch 2.11.0+cu130)" in choice.reason
    assert "`rig bench` with the same model, imgsz and batch measures them" in choice.reason


def test_a_record_for_another_batch_is_not_this_runs() -> None:
    other = LeverKey(KEY.device, KEY.torch, KEY.model, KEY.imgsz, 16, KEY.amp)
    assert _decide(_record(GOOD, key=other)).args == {"epochs": "3"}


@pytest.mark.parametrize(
    ("measured", "states", "args", "env", "says"),
    [
        ((GOOD, FUSED), {"channels_last": True, "fused_optimizer": True}, {"channels_last": "True"},
         {"RIG_FUSED_OPTIMIZER": "1"}, "x1.20 the eager step"),
        ((SLOWER,), {"channels_last": False}, {"channels_last": "False"}, {}, "x0.90 the eager step: under"),
        ((DRIFTED,), {"fused_optimizer": False}, {}, {},
         "losses moved 5.00% from eager's, beyond AMP's own 1.00%"),
        ((TINY,), {"fused_optimizer": False}, {}, {}, "under the x1.03"),
        ((GRAPHS,), {"cuda_graphs": True}, {"compile": "reduce-overhead"}, {}, "for 100 s of compiling"),
        ((Measured("cuda_graphs", None, note="CUDA graphs need a GPU"),), {"cuda_graphs": False}, {}, {},
         "not measured (CUDA graphs need a GPU)"),
    ],
)  # fmt: skip
def test_a_measured_lever_is_on_where_it_won_with_the_same_losses(
    measured: tuple[Measured, ...],
    states: dict[str, bool],
    args: dict[str, str],
    env: dict[str, str],
    says: str,
) -> None:
    decided = _decide(_record(*measured))
    got = _states(decided)
    assert {k: got[k] for k in states} == states
    assert decided.args == {"epochs": "3", **args}
    assert {k: v for k, v in decided.env.items()} == env
    assert any(says in c.reason for c in decided.choices), decided.choices
    for c in decided.choices:  # each lever the record left out stays Ultralytics'
        assert "(rig bench, 2026-12-01T21:00Z)" in c.reason or (
            c.on is None and "not in rig bench's record" in c.reason
        )


def test_cuda_graphs_are_on_only_where_the_run_wins_the_compile_back_twice() -> None:
    # eager 700 img/s at batch 64, x1.5: each step saves 0.0305 s; 100 s of compiling pays from 6,563 steps.
    assert _states(_decide(_record(GRAPHS), run_steps=10_000))["cuda_graphs"] is True
    short = _decide(_record(GRAPHS), run_steps=1_000)
    assert _states(short)["cuda_graphs"] is False and "compile" not in short.args

    def why(decided: steplevers.StepLevers) -> str:
        return {c.name: c.reason for c in decided.choices}["cuda_graphs"]

    assert "saves ~30 s over the run's 1000 steps for 100 s of compiling (it pays from 2x)" in why(short)
    assert "the run's length is unknown" in why(_decide(_record(GRAPHS), run_steps=None))
    ddp = _decide(_record(GRAPHS), world=2)
    assert _states(ddp)["cuda_graphs"] is False and "2 ranks: measured on one GPU only" in why(ddp)


def test_what_the_user_gave_wins_over_the_measurement() -> None:
    decided = _decide(
        _record(SLOWER, FUSED, GRAPHS),
        {"channels_last": "True", "compile": "False", "fused_optimizer": "False"},
    )
    assert decided.args == {
        "epochs": "3",
        "channels_last": "True",
        "compile": "False",
    }  # fused_optimizer: rig's
    assert decided.env == {"RIG_FUSED_OPTIMIZER": "0"}
    reasons = {c.name: c.reason for c in decided.choices}
    assert reasons == {
        "fused_optimizer": "fused_optimizer=False as given",
        "channels_last": "channels_last=True as given",
        "cuda_graphs": "compile=False as given",
    }


def test_rig_measured_levers_0_keeps_ultralytics_defaults() -> None:
    decided = _decide(_record(SLOWER, FUSED, GRAPHS), follow=False)
    assert decided.args == {"epochs": "3"} and decided.env == {}
    assert {c.reason for c in decided.choices} == {"RIG_MEASURED_LEVERS=0: Ultralytics' defaults"}
    assert steplevers.following({"RIG_MEASURED_LEVERS": "0"}) is False and steplevers.following({}) is True


def test_on_the_cpu_only_the_optimizer_lever_applies() -> None:
    cpu_key = LeverKey("cpu", "2.3.1+cu121", "yolo11n", 640, 16, False)
    record = _record(GOOD, FUSED, key=cpu_key)
    decided = _decide(record, key=cpu_key, cpu=True)
    assert _states(decided) == {"fused_optimizer": True}
    assert decided.args == {"epochs": "3"} and decided.env == {"RIG_FUSED_OPTIMIZER": "1"}


def test_the_run_steps_are_every_epochs_batches_of_a_ranks_share() -> None:
    assert steplevers.run_steps(100, 118_287, 64, 1) == 100 * 1849
    assert steplevers.run_steps(10, 1000, 16, 4) == 10 * 16  # 1000 images over 4 ranks of 16
    assert steplevers.run_steps(None, 1000, 16, 1) is None and steplevers.run_steps(3, None, 16, 1) is None


# ---------------------------------------------------------------------------------------------
# The records


def test_a_record_round_trips_and_is_found_by_its_key(tmp_path: Path) -> None:
    path = steplevers.write_record(_record(GOOD, GRAPHS), tmp_path)
    assert path.name == "nvidia_h200-torch2.11.0+cu130-yolo11n-640px-b64-amp.json"
    assert steplevers.read_record(KEY, tmp_path) == _record(GOOD, GRAPHS)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary left
    other = LeverKey(KEY.device, KEY.torch, KEY.model, KEY.imgsz, 32, KEY.amp)
    assert steplevers.read_record(other, tmp_path) is None


def test_a_record_that_is_not_one_is_none_never_a_hang(tmp_path: Path) -> None:
    path = tmp_path / f"{KEY.slug()}.json"
    os.mkfifo(path)  # a FIFO with no writer: opening it for reading would block
    read: list[LeverRecord | None] = []
    reader = threading.Thread(target=lambda: read.append(steplevers.read_record(KEY, tmp_path)), daemon=True)
    reader.start()
    reader.join(timeout=10)  # a regression fails here instead of hanging (a daemon thread is left behind)
    assert read == [None]
    path.unlink()
    target = tmp_path / "elsewhere.json"
    steplevers.write_record(_record(GOOD), tmp_path)
    (tmp_path / f"{KEY.slug()}.json").rename(target)
    path.symlink_to(target)  # a link, even to a good record, is not followed
    assert steplevers.read_record(KEY, tmp_path) is None
    path.unlink()
    path.write_text("x" * (steplevers.MAX_RECORD_BYTES + 1))
    assert steplevers.read_record(KEY, tmp_path) is None
    path.write_text('{"key": {"device": "NVIDIA H200"}}')
    assert steplevers.read_record(KEY, tmp_path) is None
    # A file naming another key (copied in by hand) is not this key's.
    other = LeverKey(KEY.device, KEY.torch, "yolo11s", KEY.imgsz, KEY.batch, KEY.amp)
    path.write_text(steplevers.write_record(_record(GOOD, key=other), tmp_path / "o").read_text())
    assert steplevers.read_record(KEY, tmp_path) is None


# ---------------------------------------------------------------------------------------------
# rig train --dry-run: the call site, with the GPU's name from a fake NVML


@pytest.fixture
def one_h200(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    root = tmp_path / "sys"
    fs = FakeSys(root).node(0, "0-7").online("0-7")
    fs.gpu(bus(0), 0, "0-7")
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([FakeGpu(bus_id=bus(0), mem_used=[0])]))
    monkeypatch.setenv("RIG_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("RIG_MEASURED_LEVERS", "RIG_FUSED_OPTIMIZER"):
        monkeypatch.delenv(name, raising=False)
    return ["--sysfs-root", str(root), "--gpu-bus-ids", bus(0)]


def test_rig_train_follows_the_benchs_record_for_its_gpu_model_and_batch(
    one_h200: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = [*one_h200, "data=x.yaml", "model=yolo11n.yaml", "batch=64", f"project={tmp_path / 'runs'}"]
    env, args, err = dry_run(base, capsys)
    assert "channels_last" not in args and "RIG_FUSED_OPTIMIZER" not in env
    assert (
        "INFO launch: channels_last, cuda_graphs, fused_optimizer: Ultralytics' default: not measured" in err
    )

    key = LeverKey("NVIDIA H200", steplevers.torch_version(), "yolo11n", 640, 64, True)
    steplevers.write_record(_record(SLOWER, FUSED, GRAPHS, key=key), steplevers.record_dir())
    env, args, err = dry_run(base, capsys)
    assert args["channels_last"] == "False" and env["RIG_FUSED_OPTIMIZER"] == "1"
    assert "compile" not in args  # the data cannot be counted: the run's length is unknown
    lines = [line for line in err.splitlines() if line.startswith("INFO launch: ") and "rig bench" in line]
    assert [line.split(":")[1].strip() for line in lines] == [
        "channels_last",
        "cuda_graphs",
        "fused_optimizer",
    ]

    env, args, err = dry_run([*base, "channels_last=True", "fused_optimizer=False"], capsys)
    assert args["channels_last"] == "True" and env["RIG_FUSED_OPTIMIZER"] == "0"
    assert "fused_optimizer" not in args  # rig's own: Ultralytics would refuse it

    assert cli.main(["train", "--dry-run", *base, "fused_optimizer=maybe"]) == 1
    assert "fused_optimizer=maybe: give True or False" in capsys.readouterr().err


@pytest.mark.parametrize("model", ["yolo26n.yaml", "yolo26n.pt", "/mnt/model/YOLO26n.pt"])
def test_a_record_measured_on_yolo11n_switches_nothing_for_yolo26n(
    one_h200: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], model: str
) -> None:
    # Same GPU, torch, size, batch and precision: only the model differs, and that is another record.
    key = LeverKey("NVIDIA H200", steplevers.torch_version(), "yolo11n", 640, 64, True)
    steplevers.write_record(_record(GOOD, FUSED, GRAPHS, key=key), steplevers.record_dir())
    base = [*one_h200, "data=x.yaml", f"model={model}", "batch=64", f"project={tmp_path / 'runs'}"]
    env, args, err = dry_run(base, capsys)
    assert "channels_last" not in args and "compile" not in args and "RIG_FUSED_OPTIMIZER" not in env
    assert "Ultralytics' default: not measured for yolo26n at 640 px, batch 64 on NVIDIA H200" in err
    # YOLO26n's own record is followed.
    steplevers.write_record(
        _record(GOOD, FUSED, key=dataclasses.replace(key, model="yolo26n")), steplevers.record_dir()
    )
    env, args, err = dry_run(base, capsys)
    assert args["channels_last"] == "True" and env["RIG_FUSED_OPTIMIZER"] == "1"


def test_a_cpu_run_without_batch_follows_the_record_at_ultralytics_default_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RIG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("RIG_MEASURED_LEVERS", raising=False)
    cpu_key = LeverKey("cpu", steplevers.torch_version(), "yolo11n", 320, 16, False)
    steplevers.write_record(_record(GOOD, FUSED, key=cpu_key), steplevers.record_dir())
    base = ["device=cpu", "data=x.yaml", "model=yolo11n.yaml", "imgsz=320", f"project={tmp_path / 'runs'}"]
    assert cli.main(["train", "--dry-run", *base]) == 0
    printed = capsys.readouterr()
    assert "RIG_FUSED_OPTIMIZER=1" in printed.out and "channels_last" not in printed.out
    assert (
        "INFO launch: fused_optimizer: on: x1.10 the eager step (rig bench, 2026-12-01T21:00Z)" in printed.err
    )
