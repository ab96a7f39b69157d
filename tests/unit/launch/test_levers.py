"""The speed levers `rig train` decides on: compile on the CPU said once, sync_bn only with ranks to sync.

Decisions as a table (rig.launch.levers.decide), then the same through `rig train --dry-run` on a fake
/sys, where the line is logged and the trainer's arguments and environment are printed."""

from __future__ import annotations

from pathlib import Path

import pytest
from rig.launch import levers

from tests.helpers.dryrun import dry_run
from tests.helpers.fakesys import FakeSys, bus


@pytest.mark.parametrize(
    ("raw", "on"),
    [
        ("True", True), ("true", True), ("1", True), ("default", True), ("max-autotune", True),
        ("reduce-overhead", True), ("False", False), ("false", False), ("0", False), ("none", False),
        ("", False), (None, False),
    ],
)  # fmt: skip
def test_a_switch_reads_as_ultralytics_reads_it(raw: str | None, on: bool) -> None:
    assert levers.switched_on(raw) is on


@pytest.mark.parametrize(
    ("args", "world", "cpu", "env", "says"),
    [
        ({"compile": "True"}, 1, True, {}, "compile=True on the CPU: measured 55x slower"),
        ({"compile": "max-autotune"}, 1, True, {}, "compile=max-autotune on the CPU"),
        ({"compile": "False"}, 1, True, {}, None),
        ({"compile": "True"}, 1, False, {}, None),  # on GPUs compile is Ultralytics' own, passed through
        ({"compile": "True"}, 8, False, {}, None),
        ({"sync_bn": "True"}, 2, False, {"RIG_SYNC_BN": "1"}, None),
        ({"sync_bn": "True"}, 1, False, {}, "sync_bn=True ignored: one rank"),
        (
            {"sync_bn": "True"},
            1,
            True,
            {},
            "sync_bn=True ignored: device=cpu, and torch's SyncBatchNorm takes GPU tensors only",
        ),
        ({"sync_bn": "False"}, 4, False, {}, None),
        ({}, 4, False, {}, None),
    ],
)
def test_levers(args: dict[str, str], world: int, cpu: bool, env: dict[str, str], says: str | None) -> None:
    decided = levers.decide({"epochs": "3", **args}, world=world, cpu=cpu)
    assert "sync_bn" not in decided.args  # Ultralytics has no such argument: it would refuse the run
    assert decided.args == {"epochs": "3", **{k: v for k, v in args.items() if k != "sync_bn"}}
    assert decided.env == env
    if says is None:
        assert decided.warnings == ()
    else:
        assert len(decided.warnings) == 1 and decided.warnings[0].startswith(says)
        assert "\n" not in decided.warnings[0]


@pytest.fixture
def gpus(tmp_path: Path) -> list[str]:
    root = tmp_path / "sys"
    fs = FakeSys(root).node(0, "0-7").online("0-7")
    ids = [bus(i) for i in range(2)]
    for b in ids:
        fs.gpu(b, 0, "0-7")
    return ["--sysfs-root", str(root), "--gpu-bus-ids", ",".join(ids)]


def test_sync_bn_with_one_rank_is_one_line_and_reaches_no_one(
    gpus: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RIG_SYNC_BN", raising=False)
    base = ["data=x.yaml", "model=yolo11n.yaml", f"project={tmp_path / 'runs'}", "sync_bn=True"]
    env, args, err = dry_run([*gpus, "--gpus", "1", *base], capsys)
    warnings = [line for line in err.splitlines() if line.startswith("WARNING")]
    assert warnings == [
        "WARNING launch: sync_bn=True ignored: one rank, with no other GPU to share BatchNorm statistics "
        "with; it pays with several GPUs and small per-GPU batches"
    ]
    assert "sync_bn" not in args and "RIG_SYNC_BN" not in env

    env, args, err = dry_run([*gpus, "--gpus", "2", *base], capsys)
    assert "WARNING" not in err
    assert env["RIG_SYNC_BN"] == "1" and "sync_bn" not in args


def test_compile_on_the_cpu_warns_once_and_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RIG_SYNC_BN", raising=False)
    base = ["device=cpu", "data=x.yaml", "model=yolo11n.yaml", f"project={tmp_path / 'runs'}"]
    env, args, err = dry_run([*base, "compile=default", "sync_bn=True"], capsys)
    warnings = [line for line in err.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 2
    assert warnings[0].startswith("WARNING launch: compile=default on the CPU: measured 55x slower")
    assert "sync_bn=True ignored: device=cpu" in warnings[1]
    assert args["compile"] == "default" and "sync_bn" not in args and "RIG_SYNC_BN" not in env


def test_sync_bn_with_compile_says_how_many_graph_breaks() -> None:
    from rig.launch import syncbn

    line = syncbn.compile_warning(81, True, "2.3.1+cu121")
    assert line is not None and line.startswith(
        "sync_bn=True with compile=True: torch 2.3.1+cu121 does not compile"
    )
    assert "each of its 81 SyncBatchNorm layers (at least 81 graph breaks, 82 or more compiled pieces" in line
    newer = syncbn.compile_warning(81, "max-autotune", "2.9.1+cu128")
    assert newer is not None and newer.startswith(
        "sync_bn=True with compile=max-autotune: what torch 2.9.1+cu128 compiles of SyncBatchNorm was not "
        "measured (torch 2.3 breaks the graph at each SyncBatchNorm layer: 81 graph breaks for this model"
    )
    assert "does not compile" not in newer and "tools/syncbn_graph_breaks.py" in newer
    assert syncbn.compile_warning(81, False, "2.3.1") is None
