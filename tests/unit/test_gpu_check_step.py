"""tools/gpu_check_step.py: each run measured from its telemetry rows after the first epoch, the targets
for YOLO11n computed from ours and stock, and the summary from run folders and bench JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools import gpu_check_step as check


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
        (_run(1400.0, 90.0), _run(500.0, 20.0), (False, False, False)),  # 2.8x, under 1500, not over 90 %
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


def test_the_summary_reads_each_run_folder_and_bench_json(tmp_path: Path) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir()
    for name, batch, step_s in (("ours-yolo11n", 64, 0.04), ("stock-yolo11n", 16, 0.06)):
        run = work / "runs" / name
        run.mkdir(parents=True)
        (run / "args.yaml").write_text(f"task: detect\nbatch: {batch}\nepochs: 3\nimgsz: 640\n")
        rows = _rows([(0, 0.0, 0.0, 0.0)] + [(5, 5 * step_s, 0.0, 92.0)] * 6)
        header = list(rows[0])
        lines = [",".join(header)] + [",".join(r[k] for k in header) for r in rows]
        (run / "telemetry.csv").write_text("\n".join(lines) + "\n")
    (out / "bench-yolo11n.json").write_text(
        json.dumps(
            {
                "device": "NVIDIA H200",
                "batch": 64,
                "batch_reason": "r",
                "step": {
                    "eager_img_s": 700.0,
                    "amp_noise": 0.01,
                    "equal_steps": 50,
                    "levers": [{"name": "cuda_graphs", "gain": 1.4, "equal": True, "note": None}],
                    "chosen": ["cuda_graphs"],
                    "chosen_img_s": 980.0,
                },
            }
        )
    )
    result = check.summarize(out, work, images=320)  # 5 steps an epoch at 64, 20 at 16
    assert json.loads((out / "step.json").read_text()) == result
    ours, stock = result["runs"]["ours-yolo11n"], result["runs"]["stock-yolo11n"]
    assert ours["steps"] == 25 and stock["steps"] == 10  # stock's first epoch is 20 steps: 4 rows
    assert result["targets_yolo11n_640"]["gpu_busy_pct"]["met"] is True
    text = "\n".join(check.lines(result))
    assert "step yolo11n: eager 700 img/s at batch 64 on NVIDIA H200" in text
    assert "  cuda_graphs: x1.40 losses equal" in text and "chosen cuda_graphs: 980 img/s" in text
    assert "run ours-yolo11n: batch 64, 25 steps measured" in text and "target img_s:" in text
