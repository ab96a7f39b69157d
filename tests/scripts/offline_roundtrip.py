"""Train, validate, predict and export a YOLO11n on a tiny generated dataset, offline, on the CPU.

Run inside the image with `--network none`; prints one JSON line with what each step produced.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import network_guard  # must wrap sockets before anything else imports


def make_dataset(root: Path, n_train: int = 16, n_val: int = 4, size: int = 160) -> Path:
    import cv2
    import numpy as np

    rng = np.random.default_rng(0)
    for split, n in (("train", n_train), ("val", n_val)):
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            img = rng.integers(0, 60, (size, size, 3), dtype=np.uint8)
            w, h = (int(v) for v in rng.integers(size // 6, size // 2, 2))
            x, y = int(rng.integers(0, size - w)), int(rng.integers(0, size - h))
            cls = i % 2
            color = (0, 0, 255) if cls == 0 else (0, 255, 0)
            cv2.rectangle(img, (x, y), (x + w, y + h), color, -1)
            cv2.imwrite(str(root / "images" / split / f"{i}.jpg"), img)
            xc, yc = (x + w / 2) / size, (y + h / 2) / size
            (root / "labels" / split / f"{i}.txt").write_text(f"{cls} {xc} {yc} {w / size} {h / size}\n")
    data = root / "data.yaml"
    data.write_text(f"path: {root}\ntrain: images/train\nval: images/val\nnames:\n  0: red\n  1: green\n")
    return data


def main(work: Path) -> None:
    from ultralytics import YOLO

    data = make_dataset(work / "data")
    model = YOLO("yolo11n.yaml")
    model.train(
        data=str(data),
        epochs=1,
        imgsz=160,
        batch=8,
        device="cpu",
        workers=0,
        project=str(work / "runs"),
        name="roundtrip",
        exist_ok=True,
        plots=True,
    )
    best = Path(model.trainer.best)
    metrics = YOLO(best).val(data=str(data), imgsz=160, batch=4, device="cpu", plots=True)
    results = YOLO(best).predict(str(work / "data" / "images" / "val" / "0.jpg"), imgsz=160, device="cpu")
    onnx_path = YOLO(best).export(format="onnx", imgsz=160, simplify=True, device="cpu")
    print(
        json.dumps(
            {
                "best": str(best),
                "best_exists": best.exists(),
                "map50": float(metrics.box.map50),
                "predicted_images": len(results),
                "onnx": str(onnx_path),
                "onnx_exists": Path(onnx_path).exists(),
                "network_attempts": network_guard.ATTEMPTS,
            }
        )
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
