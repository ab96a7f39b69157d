"""Inside the image: a tiny real CPU training run with telemetry attached through the Python API.

Prints one JSON line: the run directory's telemetry files as written.
"""

import csv
import json
import sys
import tempfile
from pathlib import Path


def make_dataset(root: Path, n_train: int = 8, n_val: int = 2, size: int = 64) -> Path:
    import cv2
    import numpy as np

    rng = np.random.default_rng(0)
    for split, n in (("train", n_train), ("val", n_val)):
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            img = rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
            cv2.imwrite(str(root / "images" / split / f"{i}.jpg"), img)
            (root / "labels" / split / f"{i}.txt").write_text("0 0.5 0.5 0.4 0.4\n")
    data = root / "data.yaml"
    data.write_text(f"path: {root}\ntrain: images/train\nval: images/val\nnames: {{0: box}}\n")
    return data


def main() -> None:
    from rig import telemetry
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from ultralytics import YOLO

    tmp = Path(tempfile.mkdtemp())
    data = make_dataset(tmp / "data")
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
