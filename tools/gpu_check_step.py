"""The Python half of tools/gpu_check_step.sh: stock `yolo train` under telemetry, and the summary.

    python tools/gpu_check_step.py stock-train key=value ...   # what `yolo train` runs, timed by telemetry
    python tools/gpu_check_step.py summarize OUT WORK IMAGES   # $OUT/step.json and the summary lines

`stock-train` is Ultralytics' CLI path (YOLO(model).train(**args), its own trainer, its own defaults)
with rig's telemetry attached, so stock and `rig train` are timed by the same code: telemetry.csv in
each run directory (steps, step time, data wait, and with NVML the GPU's utilisation per sample).

`summarize` reads every run's telemetry.csv and args.yaml under WORK/runs (each trained on the same
IMAGES train images) and every bench JSON under OUT, and measures each run over its steps after the
first epoch (start-up, cuDNN autotuning and any compile are the first epoch's): images/s by
telemetry's wall clock and by step time, the GPU's busy share (mean utilisation of those samples),
the share of step time spent waiting for data. Then the targets for YOLO11n at 640 px: `rig train`
without batch= at least TARGET_RATIO x stock `yolo train` and TARGET_IMG_S images/s, and the GPU
busy over TARGET_BUSY % of the measured steps.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

TARGET_RATIO = 3.0
TARGET_IMG_S = 1500.0
TARGET_BUSY = 90.0


@dataclass(frozen=True)
class RunFigures:
    name: str
    batch: int
    epochs: int
    steps: int  # measured: after the first epoch
    img_s_wall: float | None  # the measured steps' images over the wall-clock time they took
    img_s_steps: float | None  # the same over the steps' own time (telemetry's step time)
    busy_pct: float | None  # the GPU's mean utilisation over the measured samples
    data_wait: float | None  # share of step time waiting for the loader
    samples: int


def _floats(rows: Sequence[Mapping[str, str]], key: str) -> list[float]:
    return [float(r[key]) if r.get(key) not in (None, "") else math.nan for r in rows]


def measure_run(
    name: str, rows: Sequence[Mapping[str, str]], batch: int, steps_per_epoch: int, epochs: int, gpu: int = 0
) -> RunFigures:
    """One run's figures from its telemetry rows, the first epoch's steps left out."""
    done, first = 0, None
    for i, row in enumerate(rows):
        done += int(row.get("steps") or 0)
        if done >= steps_per_epoch:
            first = i + 1  # the row after the one that finished the first epoch
            break
    last = max((i for i, r in enumerate(rows) if int(r.get("steps") or 0) > 0), default=-1)
    measured = list(rows[first : last + 1]) if first is not None and last >= first else []
    steps = sum(int(r.get("steps") or 0) for r in measured)
    step_s = sum(_floats(measured, "step_s"))
    wait_s = sum(_floats(measured, "data_wait_s"))
    util = [v for v in _floats(measured, f"gpu{gpu}_util_pct") if not math.isnan(v)]
    wall = (
        float(measured[-1]["elapsed_s"]) - float(rows[first - 1]["elapsed_s"]) if measured and first else 0.0
    )
    return RunFigures(
        name=name,
        batch=batch,
        epochs=epochs,
        steps=steps,
        img_s_wall=steps * batch / wall if wall > 0 else None,
        img_s_steps=steps * batch / step_s if step_s > 0 else None,
        busy_pct=sum(util) / len(util) if util else None,
        data_wait=wait_s / step_s if step_s > 0 else None,
        samples=len(measured),
    )


def targets(ours: RunFigures | None, stock: RunFigures | None) -> dict[str, Any]:
    """The targets for YOLO11n at 640 px: each figure and whether it is met (None: no figure)."""
    ours_img_s = ours.img_s_wall if ours else None
    stock_img_s = stock.img_s_wall if stock else None
    ratio = ours_img_s / stock_img_s if ours_img_s and stock_img_s else None
    busy = ours.busy_pct if ours else None

    return {
        "ratio_vs_stock": {
            "value": ratio,
            "target": TARGET_RATIO,
            "met": None if ratio is None else ratio >= TARGET_RATIO,
        },
        "img_s": {
            "value": ours_img_s,
            "target": TARGET_IMG_S,
            "met": None if ours_img_s is None else ours_img_s >= TARGET_IMG_S,
        },
        "gpu_busy_pct": {
            "value": busy,
            "target": TARGET_BUSY,
            "met": None if busy is None else busy > TARGET_BUSY,
        },
    }


def _args_yaml(path: Path) -> dict[str, str]:
    """Ultralytics' args.yaml as flat key: value text (no YAML library needed for these keys)."""
    out = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition(":")
        if sep and not line.startswith((" ", "-")):
            out[key.strip()] = value.strip()
    return out


def _rows(path: Path) -> list[dict[str, str]]:
    import csv

    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def summarize(out: Path, work: Path, images: int) -> dict[str, Any]:
    runs: dict[str, RunFigures] = {}
    for run_dir in sorted((work / "runs").glob("*")):
        csv_path, args_path = run_dir / "telemetry.csv", run_dir / "args.yaml"
        if not csv_path.is_file() or not args_path.is_file():
            continue
        args = _args_yaml(args_path)
        batch, epochs = int(args.get("batch", "16")), int(args.get("epochs", "1"))
        per_epoch = max(-(-images // batch), 1)
        runs[run_dir.name] = measure_run(run_dir.name, _rows(csv_path), batch, per_epoch, epochs)
    benches = {}
    for path in sorted(out.glob("bench-*.json")):
        r = json.loads(path.read_text())
        step = r.get("step") or {}
        benches[path.stem.removeprefix("bench-")] = {
            "device": r.get("device"),
            "batch": r.get("batch"),
            "batch_reason": r.get("batch_reason"),
            "eager_img_s": step.get("eager_img_s"),
            "amp_noise": step.get("amp_noise"),
            "equal_steps": step.get("equal_steps"),
            "levers": step.get("levers"),
            "chosen": step.get("chosen"),
            "chosen_img_s": step.get("chosen_img_s"),
        }
    result = {
        "runs": {k: asdict(v) for k, v in runs.items()},
        "bench": benches,
        "targets_yolo11n_640": targets(runs.get("ours-yolo11n"), runs.get("stock-yolo11n")),
    }
    (out / "step.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def lines(result: Mapping[str, Any]) -> list[str]:
    from rig.observe.bench.results import rate  # three significant digits, as rig bench prints them

    def fmt(v: float | None, spec: str = "rate") -> str:
        if v is None:
            return "n/a"
        return rate(v) if spec == "rate" else format(v, spec)

    out = []
    for name, b in result["bench"].items():
        out.append(f"step {name}: eager {fmt(b['eager_img_s'])} img/s at batch {b['batch']} on {b['device']}")
        for lv in b["levers"] or []:
            gain = "not measured" if lv["gain"] is None else f"x{lv['gain']:.2f}"
            eq = "" if lv["equal"] is None else (" losses equal" if lv["equal"] else " LOSSES DIFFER")
            note = f" ({lv['note']})" if lv.get("note") else ""
            out.append(f"  {lv['name']}: {gain}{eq}{note}")
        if b["chosen"] and b["chosen_img_s"] is not None:  # measured together where more than one
            out.append(f"  chosen {'+'.join(b['chosen'])}: {fmt(b['chosen_img_s'])} img/s")
    for name, r in result["runs"].items():
        out.append(
            f"run {name}: batch {r['batch']}, {r['steps']} steps measured: {fmt(r['img_s_wall'])} img/s "
            f"(steps alone {fmt(r['img_s_steps'])}), GPU busy {fmt(r['busy_pct'], '.0f')} %, data wait "
            f"{fmt(r['data_wait'] and 100 * r['data_wait'], '.0f')} %"
        )
    for name, t in result["targets_yolo11n_640"].items():
        state = {True: "MET", False: "NOT MET", None: "not measured"}[t["met"]]
        out.append(f"target {name}: {fmt(t['value'], '.2f')} (target {t['target']:g}): {state}")
    return out


def stock_train(argv: Sequence[str]) -> int:
    """`yolo train` as its CLI runs it, with rig's telemetry timing the steps."""
    from rig.observe import telemetry
    from ultralytics import YOLO
    from ultralytics.cfg import smart_value

    args: dict[str, Any] = {}
    for item in argv:
        key, _, value = item.partition("=")
        args[key] = value if key in {"model", "data", "project", "name", "device"} else smart_value(value)
    model = YOLO(args.pop("model"))
    telemetry.attach(model)  # into the run directory Ultralytics makes (its save_dir)
    model.train(**args)
    return 0


def main(argv: Sequence[str]) -> int:
    if argv[:1] == ["stock-train"]:
        return stock_train(argv[1:])
    if argv[:1] == ["summarize"] and len(argv) == 4:
        result = summarize(Path(argv[1]), Path(argv[2]), int(argv[3]))
        print("\n".join(lines(result)))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
