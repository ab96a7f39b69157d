"""tools/gpu_check.py: each run measured from its telemetry rows after the first epoch, the targets for
YOLO11n and YOLO26n from ours and stock, and each part's figures appended to results.jsonl and
summary.txt from what the check left (run folders and logs, the probes' lines, rig bench's JSON, a
stop's two logs), each with its model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools import gpu_check as check


def _rows(
    per_row: list[tuple[int, float, float, float | None]], interval: float = 0.25
) -> list[dict[str, str]]:
    """(steps, step_s, data_wait_s, util) per telemetry row, one row each interval."""
    return [
        {
            "time": f"{1000 + i * interval:.3f}",
            "elapsed_s": f"{(i + 1) * interval:.3f}",
            "steps": str(steps),
            "step_s": f"{step_s:.6f}",
            "data_wait_s": f"{wait:.6f}",
            "gpu0_util_pct": "" if util is None else f"{util:.3f}",
        }
        for i, (steps, step_s, wait, util) in enumerate(per_row)
    ]


def test_a_run_is_measured_after_its_first_epoch_and_before_its_end() -> None:
    rows = _rows(
        [
            (0, 0.0, 0.0, 0.0),  # model build, dataset, AMP check: no steps
            (2, 0.2, 0.1, 30.0),
            (2, 0.2, 0.1, 40.0),  # the first epoch's 4 steps end here
            (3, 0.24, 0.0, 95.0),
            (3, 0.24, 0.01, 97.0),
            (2, 0.2, 0.0, 93.0),
            (0, 0.0, 0.0, 5.0),  # the last validation and saving: not steps
        ]
    )
    r = check.measure_run("ours-yolo11n", rows, batch=64, steps_per_epoch=4, epochs=3)
    assert (r.steps, r.samples) == (8, 3)
    assert r.img_s_wall == pytest.approx(8 * 64 / 0.75)  # three rows of 0.25 s
    assert r.img_s_steps == pytest.approx(8 * 64 / 0.68)
    assert r.busy_pct == pytest.approx(95.0) and r.data_wait == pytest.approx(0.01 / 0.68)
    # No GPU sampled (the CPU smoke): the rest is still measured.
    cpu = check.measure_run("x", _rows([(4, 1.0, 0.1, None), (4, 1.0, 0.2, None)]), 16, 4, 2)
    assert cpu.busy_pct is None and cpu.steps == 4
    # A run that never finished its first epoch has nothing measured.
    short = check.measure_run("x", _rows([(1, 0.1, 0.0, 50.0)]), 16, 4, 2)
    assert (short.steps, short.img_s_wall, short.busy_pct) == (0, None, None)


def _run(img_s: float, busy: float | None) -> check.RunFigures:
    return check.RunFigures("r", 64, 8, 100, img_s, img_s * 1.1, busy, 0.0, 20)


@pytest.mark.parametrize(
    ("ours", "stock", "met"),
    [
        (_run(1600.0, 95.0), _run(500.0, 20.0), (True, True, True)),
        (_run(1400.0, 89.0), _run(500.0, 20.0), (False, False, False)),  # 2.8x, under 1500, under 90 %
        (_run(1600.0, None), None, (None, True, None)),
    ],
)
def test_the_targets(
    ours: check.RunFigures, stock: check.RunFigures | None, met: tuple[bool | None, ...]
) -> None:
    t = check.targets(ours, stock)
    assert (t["ratio_vs_stock"]["met"], t["img_s"]["met"], t["gpu_busy_pct"]["met"]) == met
    assert (
        t["img_s"]["target"] == 1500
        and t["ratio_vs_stock"]["target"] == 3
        and t["gpu_busy_pct"]["target"] == 90
    )
    assert check.targets(None, None)["img_s"] == {"value": None, "target": 1500.0, "met": None}
    # YOLO26n: 3x stock and the GPU busy, no images/s target.
    assert set(check.targets(ours, stock, None)) == {"ratio_vs_stock", "gpu_busy_pct"}
    assert check.IMG_S_TARGETS == {"yolo11n": 1500.0}


def _results(out: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def _pair(work: Path, model: str, optimizer: str) -> None:
    for name, batch, step_s in (("ours", 64, 0.04), ("stock", 16, 0.06)):
        run = work / "runs" / f"{name}-{model}"
        run.mkdir(parents=True)
        (run / "args.yaml").write_text(
            f"task: detect\nbatch: {batch}\nepochs: 3\nimgsz: 640\noptimizer: {optimizer}\n"
        )
        rows = _rows([(0, 0.0, 0.0, 0.0)] + [(5, 5 * step_s, 0.0, 92.0)] * 6)
        header = list(rows[0])
        lines = [",".join(header)] + [",".join(r[k] for k in header) for r in rows]
        (run / "telemetry.csv").write_text("\n".join(lines) + "\n")


def test_the_runs_are_read_from_their_folders_and_logs_each_models_pair_apart(tmp_path: Path) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir()
    _pair(work, "yolo11n", "auto")
    _pair(work, "yolo26n", "MuSGD")
    (work / "ours-yolo11n.log").write_text(
        "INFO launch: batch from the GPUs' memory: skipped\n"
        "INFO launch: batch=64: NVIDIA H200 has 139.0 GiB free; bounded by nbs=64\n"
        'PEAK {"pid": 1, "rss_mib": 900}\nPEAK {"pid": 2, "rss_mib": 3000, "reserved_mib": 20480.0}\n'
    )
    result = check.runs(out, work, 320, "yolo11n", "yolo11n.yaml", "")  # 5 steps an epoch at 64, 20 at 16
    assert result["gpu_busy_pct"]["met"] is True and "img_s" in result
    rows = {r.get("run"): r for r in _results(out) if r.get("run")}
    ours, stock = rows["ours"], rows["stock"]
    assert ours["steps"] == 25 and stock["steps"] == 10  # stock's first epoch is 20 steps: 4 rows
    assert ours["model"] == "yolo11n" and ours["optimizer"] == "auto"
    assert ours["batch_reason"] == "batch=64: NVIDIA H200 has 139.0 GiB free; bounded by nbs=64"
    assert ours["torch_peak"]["reserved_mib"] == 20480.0 and stock["torch_peak"] == {}
    summary = (out / "summary.txt").read_text()
    assert "runs: ours yolo11n (yolo11n.yaml): batch 64, optimizer auto, 25 steps measured" in summary
    assert "torch 20480 MiB reserved" in summary
    assert "target img_s yolo11n:" in summary and "target ratio_vs_stock yolo11n:" in summary
    # YOLO26n's pair, from its own folders and logs (none here: no batch line), with MuSGD named.
    result = check.runs(out, work, 320, "yolo26n", "yolo26n.yaml", "optimizer=MuSGD")
    assert set(result) == {"ratio_vs_stock", "gpu_busy_pct"}
    summary = (out / "summary.txt").read_text()
    assert "runs: ours yolo26n (yolo26n.yaml, optimizer=MuSGD): batch 64, optimizer MuSGD" in summary
    assert "no batch line" in summary and "target ratio_vs_stock yolo26n:" in summary
    assert "target img_s yolo26n" not in summary
    # A run that left nothing: said, and no targets.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert check.runs(empty, tmp_path / "none", 320, "yolo26n", "yolo26n.yaml", "") == {}
    assert "stock yolo26n (yolo26n.yaml): no telemetry.csv" in (empty / "summary.txt").read_text()


def test_the_tail_separates_affine_from_perspective_and_times_each_half(tmp_path: Path) -> None:
    warp = {
        "mode": "warp",
        "device": "cuda:0",
        "cases": [
            {"settings": "{'degrees': 30.0}", "pixels": 1000, "exact": 0.99, "over1": 0},
            {"settings": "{'perspective': 0.001}", "pixels": 2000, "exact": 0.5, "over1": 20},
        ],
    }
    tail = {
        "mode": "tail",
        "moved": "colour",
        "device": "cuda:0",
        "batch": 16,
        "imgsz": 640,
        "ms_per_image": 0.012,
        "ms_per_batch": 0.19,
        "peak_gib": 1.0,
    }
    whole = {**tail, "moved": "geometry", "ms_per_image": 0.3}
    log = tmp_path / "tail.log"
    log.write_text(f"noise\nPROBE {json.dumps(warp)}\nPROBE {json.dumps(tail)}\nPROBE {json.dumps(whole)}\n")
    assert check.tail(tmp_path, log) == 0
    (mosaic,) = [r for r in _results(tmp_path) if r.get("moved") == "mosaic+warp"]
    assert mosaic["ms_per_image"] == pytest.approx(0.288) and mosaic["met"] is True
    kinds = {r["kind"]: r for r in _results(tmp_path) if "kind" in r}
    assert kinds["affine"]["share_off_0"] == pytest.approx(0.01) and kinds["affine"]["share_off_1"] == 0
    assert kinds["perspective"]["share_off_0"] == pytest.approx(0.5)
    assert kinds["perspective"]["share_off_1"] == pytest.approx(0.01)
    assert (
        "colour+layout on cuda:0, batch 16 at 640 px: 0.012 ms/image"
        in (tmp_path / "summary.txt").read_text()
    )
    # Without the timing probe the part has not measured what it is for.
    log.write_text(f"PROBE {json.dumps(warp)}\n")
    assert check.tail(tmp_path, log) == 1


def test_the_levers_keep_each_ones_losses_the_optimizers_share_and_bf16(tmp_path: Path) -> None:
    bench = tmp_path / "bench.json"
    lever = {
        "name": "cuda_graphs",
        "img_s": 980.0,
        "gain": 1.4,
        "equal": True,
        "note": None,
        "losses": [3.0, 2.9],
    }
    bf16 = {"name": "bf16", "img_s": None, "gain": None, "equal": None, "note": "no native bfloat16"}
    step = {
        "eager_img_s": 700.0,
        "batch": 64,
        "amp_noise": 0.01,
        "equal_steps": 2,
        "eager_losses": [3.0, 2.91],
        "levers": [lever, bf16],
        "chosen": ["cuda_graphs"],
        "chosen_img_s": 980.0,
        "optimizer": "MuSGD",
        "optimizer_step_ms": 62.2,
        "optimizer_share": 0.61,
    }
    bench.write_text(json.dumps({"device": "NVIDIA H200", "step": step, "bottleneck": "optimizer"}))
    assert check.levers(tmp_path, bench, "yolo26n", "cuda_graphs,bf16") == 0
    rows = {r["lever"]: r for r in _results(tmp_path) if "lever" in r}
    assert rows["eager"]["losses"] == [3.0, 2.91] and rows["cuda_graphs"]["losses"] == [3.0, 2.9]
    assert rows["eager"]["optimizer"] == "MuSGD" and rows["eager"]["model"] == "yolo26n"
    summary = (tmp_path / "summary.txt").read_text()
    assert "yolo26n: cuda_graphs on: x1.40 of off, losses equal" in summary
    assert "yolo26n: amp=bf16 against fp16: not measured of off (no native bfloat16)" in summary
    assert "with MuSGD, its step 62.2 ms alone, 61 % of the train step" in summary
    assert "bottleneck optimizer" in summary and "yolo26n: rig train would switch on: cuda_graphs" in summary
    # A lever asked for that the bench did not measure fails the part, saying which.
    assert check.levers(tmp_path, bench, "yolo26n", "channels_last,bf16") == 1
    assert "yolo26n: MISSING from the bench: channels_last" in (tmp_path / "summary.txt").read_text()


STOPPED = "INFO trainer: stop: /w/runs/e/weights/last.pt continues at epoch 1/3 at batch 3/8 (1.9 s)\n"
RESUMED = "INFO launch: resume=auto: continuing /w/runs/e/weights/last.pt at epoch 1/3 at batch 3/8\nend\n"


@pytest.mark.parametrize(
    ("rc", "stopped", "rc2", "resumed", "ok"),
    [
        (143, STOPPED, 0, RESUMED, True),
        (0, STOPPED, 0, RESUMED, False),  # not stopped by the signal
        (143, STOPPED, 1, RESUMED + "Traceback (most recent call last):\nRuntimeError: devices\n", False),
        (143, STOPPED, 0, "INFO launch: starting afresh\n", False),  # did not continue where it saved
        (
            143,
            STOPPED.replace("at batch 3/8", "trained, its validation next"),
            0,
            RESUMED,
            False,
        ),  # not inside
    ],
)
def test_a_stop_counts_when_it_saved_where_asked_and_resume_continued_there(
    tmp_path: Path, rc: int, stopped: str, rc2: int, resumed: str, ok: bool
) -> None:
    (tmp_path / "stop.log").write_text(stopped)
    (tmp_path / "resumed.log").write_text(resumed)
    got = check.stop(
        tmp_path,
        "epoch-stop",
        rc,
        " at batch ",
        rc2,
        tmp_path / "stop.log",
        tmp_path / "resumed.log",
        "yolo26n",
    )
    assert got == (0 if ok else 1)
    (row,) = _results(tmp_path)
    assert row["ok"] is ok and row["rc"] == rc and row["model"] == "yolo26n"
    assert ("FAILED" in (tmp_path / "summary.txt").read_text()) is not ok


TRAINER = "INFO launch: Executing: torchrun ... -m rig.launch.trainer data=x.yaml model=yolo11n.yaml{}\n"


def test_one_gpu_gets_a_batch_from_its_memory_and_the_cpu_none() -> None:
    gpu = "INFO launch: batch=64: NVIDIA H200 has 139.0 GiB free; bounded by nbs=64\n" + TRAINER.format(
        " batch=64"
    )
    assert check.dry_run_batch(gpu, cpu=False) == (
        "64",
        "batch=64: NVIDIA H200 has 139.0 GiB free; bounded by nbs=64",
        True,
    )
    assert check.dry_run_batch(TRAINER.format(""), cpu=False)[2] is False  # one GPU, no batch: the old rule
    assert check.dry_run_batch(TRAINER.format(""), cpu=True)[:1] == (None,)
    assert check.dry_run_batch(TRAINER.format(""), cpu=True)[2] is True
    assert check.dry_run_batch("ERROR rig: no data\n", cpu=True)[2] is False  # no command at all


def test_again_runs_what_failed_was_cut_killed_or_never_began() -> None:
    notes = (
        "1 env started\n2 env ok 9 s\n3 runs started\n4 runs failed 20 s: rc 1\n"
        "5 tail started\n6 tail ok 7 s\n"
        "7 levers started\n8 levers cut 170 s: over its 170 s\n9 planner started\n"  # killed in planner
    )
    parts = ["env", "runs", "tail", "levers", "planner", "resume"]
    assert check.again(notes, parts) == ["runs", "levers", "planner", "resume"]
    assert check.again(notes + "10 runs started\n11 runs ok 30 s\n", parts) == ["levers", "planner", "resume"]
    assert check.again("", parts) == parts  # no notes: the first call never began
