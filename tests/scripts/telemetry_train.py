"""Inside the image: a tiny real CPU training run with telemetry attached through the Python API.

Prints one JSON line: the run directory's telemetry files as written.
"""

import csv
import json
import sys
import tempfile
from pathlib import Path


def main() -> None:
    from rig.instrument import telemetry
    from rig.yolo.demo_data import make_demo_dataset
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from ultralytics import YOLO

    tmp = Path(tempfile.mkdtemp())
    data = make_demo_dataset(tmp / "data", train=8, val=2, imgsz=64)
    model = YOLO("yolo11n.yaml")
    recorder = telemetry.attach(model)  # run directory: the trainer's save_dir
    model.train(
        data=str(data), epochs=1, imgsz=64, batch=4, workers=0, device="cpu", plots=False,
        project=str(tmp / "runs"), name="tiny", exist_ok=True, verbose=False, amp=False,
    )  # fmt: skip
    run = tmp / "runs" / "tiny"
    acc = EventAccumulator(str(run / "telemetry"))
    acc.Reload()
    with (run / "telemetry.csv").open() as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    print(
        json.dumps(
            {
                "run_dir": str(recorder.run_dir),
                "header": reader.fieldnames,
                "csv_rows": len(rows),
                "summary": json.loads((run / "telemetry_summary.json").read_text()),
                "tags": sorted(acc.Tags()["scalars"]),
            }
        ),
        file=sys.stdout,
    )


if __name__ == "__main__":
    main()
