"""Train, validate, predict and export a YOLO11n on a tiny generated dataset, offline, on the CPU.

Run inside the image with `--network none`; prints one JSON line with what each step produced.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import network_guard  # must wrap sockets before anything else imports


def main(work: Path) -> None:
    from rig.yolo.demo_data import make_demo_dataset
    from ultralytics import YOLO

    data = make_demo_dataset(work / "data", train=16, val=4, imgsz=160)
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
    image = next((work / "data" / "images" / "val").glob("*.jpg"))
    results = YOLO(best).predict(str(image), imgsz=160, device="cpu")
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
