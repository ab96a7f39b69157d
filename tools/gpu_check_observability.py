"""GPU check workload for telemetry, run by tools/gpu_check_observability.sh on a lent GPU.

Two short real GPU runs under rig.observe.telemetry, same model, different loaders:
- fast:    batches already on the GPU, the loader never makes the step wait;
- starved: a one-worker DataLoader that sleeps per sample, so the GPU waits for data.
With Ultralytics importable it also trains YOLO11n on rig's generated demo data through
`telemetry.attach(model)`. Then it checks what the telemetry wrote and prints PASS/FAIL lines.

Usage: python3 tools/gpu_check_observability.py OUT_DIR [DEMO_DATA_YAML]
"""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

RESULTS: list[tuple[bool, str]] = []
DEVICE = os.environ.get("RIG_CHECK_DEVICE", "cuda:0")  # cpu: a dry run of this script without a GPU
SECONDS = float(os.environ.get("RIG_CHECK_SECONDS", "20"))  # per torch run


def expect(ok: bool, what: str) -> None:
    RESULTS.append((ok, what))
    print(f"{'PASS' if ok else 'FAIL'} {what}", flush=True)


def torch_run(run_dir: Path, *, starved: bool, seconds: float) -> dict[str, Any]:
    import torch
    from rig.observe import telemetry
    from torch import nn

    dev = torch.device(DEVICE)
    model = nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(64, 128, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(128, 256, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(256, 10),
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    class Slow(torch.utils.data.Dataset[tuple[Any, Any]]):
        def __len__(self) -> int:
            return 1 << 20

        def __getitem__(self, i: int) -> tuple[Any, Any]:
            time.sleep(0.004)  # a loader starved of CPU, as on a box with too few cores per GPU
            return torch.rand(3, 128, 128), i % 10

    batches: Any
    if starved:
        batches = iter(torch.utils.data.DataLoader(Slow(), batch_size=32, num_workers=1))
    else:
        n = 256 if dev.type == "cuda" else 4  # a CPU dry run only checks the plumbing
        x, y = torch.rand(n, 3, 128, 128, device=dev), torch.randint(0, 10, (n,), device=dev)
        batches = iter(lambda: (x, y), None)

    with telemetry.record(run_dir) as rec:
        rec.timer.epoch_start()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            xb, yb = next(batches)
            rec.timer.batch_start()
            xb, yb = xb.to(dev, non_blocking=True), yb.to(dev, non_blocking=True)
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
                loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss.item()  # sync, as Ultralytics' progress bar does, so step time is GPU time
            rec.timer.batch_end()
    return json.loads((run_dir / "telemetry_summary.json").read_text())


def yolo_run(run_dir: Path, data: str) -> dict[str, Any] | None:
    try:
        from ultralytics import YOLO
    except ImportError:
        print("INFO ultralytics not importable here: YOLO run skipped (carry its wheels in .whl)", flush=True)
        return None
    from rig.observe import telemetry

    model = YOLO("yolo11n.yaml")
    telemetry.attach(model, run_dir)
    # amp=False: the AMP check downloads yolo11n.pt, and this machine has no network.
    model.train(
        data=data, epochs=2, imgsz=320, batch=32, device=0, workers=4, plots=False, amp=False,
        project=str(run_dir.parent), name="yolo_train", exist_ok=True,
    )  # fmt: skip
    return json.loads((run_dir / "telemetry_summary.json").read_text())


def check_run(name: str, run_dir: Path, summary: dict[str, Any]) -> None:
    with (run_dir / "telemetry.csv").open() as f:
        rows = list(csv.DictReader(f))
    expect(len(rows) >= 5, f"{name}: {len(rows)} CSV rows (>= 5 at one per second)")
    expect(bool(rows) and "gpu0_util_pct" in rows[0], f"{name}: CSV has GPU 0 columns")
    filled = [r for r in rows if r.get("gpu0_util_pct")]
    expect(len(filled) >= len(rows) - 1, f"{name}: {len(filled)}/{len(rows)} rows hold NVML readings")
    gpus = summary.get("gpus", [])
    expect(bool(gpus), f"{name}: summary has {len(gpus)} GPU(s), nvml={summary.get('nvml')}")
    if gpus:
        g = gpus[0]
        expect((g.get("peak_mem_mib") or 0) > 100, f"{name}: peak memory {g.get('peak_mem_mib')} MiB > 100")
        expect(g.get("mean_power_w") is not None, f"{name}: power read ({g.get('mean_power_w')} W)")
    expect(summary.get("data_wait_share") is not None, f"{name}: data wait {summary.get('data_wait_share')}")
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        acc = EventAccumulator(str(run_dir / "telemetry"))
        acc.Reload()
        util = acc.Scalars("gpu0/util_pct")
        expect(len(util) >= len(filled) - 1, f"{name}: TensorBoard holds {len(util)} gpu0/util_pct points")
    except Exception as e:
        expect(False, f"{name}: TensorBoard events readable ({type(e).__name__}: {e})")


def main() -> int:
    out = Path(sys.argv[1])
    data = sys.argv[2] if len(sys.argv) > 2 else None
    work = Path("/tmp/rig-obs-work")
    summaries: dict[str, Any] = {}
    for name, starved in (("fast", False), ("starved", True)):
        summaries[name] = torch_run(work / name, starved=starved, seconds=SECONDS)
        check_run(name, work / name, summaries[name])
        (out / f"telemetry_{name}.csv").write_bytes((work / name / "telemetry.csv").read_bytes())
    fast, starved_s = summaries["fast"], summaries["starved"]
    if fast.get("gpus") and starved_s.get("gpus"):
        fu, su = fast["gpus"][0]["mean_util_pct"] or 0, starved_s["gpus"][0]["mean_util_pct"] or 0
        expect(fu > su, f"busy GPU reads busier: mean util fast {fu:.1f}% > starved {su:.1f}%")
        expect(fu > 50, f"fast run keeps the GPU busy: {fu:.1f}% > 50%")
    fw, sw = fast.get("data_wait_share") or 0, starved_s.get("data_wait_share") or 0
    expect(sw > 0.5 > fw, f"data wait share names the starved loader: starved {sw:.1%} > 50% > fast {fw:.1%}")
    if data and DEVICE.startswith("cuda"):
        yolo = yolo_run(work / "yolo", data)
        if yolo is not None:
            summaries["yolo"] = yolo
            check_run("yolo", work / "yolo", yolo)
    (out / "telemetry_summaries.json").write_text(json.dumps(summaries, indent=2) + "\n")
    failed = [w for ok, w in RESULTS if not ok]
    print(f"{len(RESULTS) - len(failed)} passed, {len(failed)} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
