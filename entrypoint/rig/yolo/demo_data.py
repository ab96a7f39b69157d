"""`rig demo-data DIR`: a generated YOLO detection dataset, so training works out of the box offline.

Simple shapes (one class each) in random colours on noisy, shaded backgrounds, with exact boxes,
train/val splits and a data yaml without `path:` (its folder is the root, wherever it is moved).
The same seed and sizes give byte-identical files.
"""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path
from typing import Any

import yaml

from rig import log
from rig.errors import RigError

_logger = log.get("demo-data")

CLASSES = ("circle", "square", "triangle", "cross", "ellipse")
YAML_NAME = "data.yaml"
MAX_OBJECTS = 4


def _draw(cv2: Any, img: Any, cls: int, cx: int, cy: int, r: int, color: tuple[int, ...], ar: float) -> None:
    if cls == 0:
        cv2.circle(img, (cx, cy), r, color, -1, cv2.LINE_AA)
    elif cls == 1:
        cv2.rectangle(img, (cx - r, cy - r), (cx + r, cy + r), color, -1)
    elif cls == 2:
        pts = [(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)]
        cv2.fillPoly(img, [_np().array(pts, dtype=_np().int32)], color, cv2.LINE_AA)
    elif cls == 3:
        t = max(r // 3, 1)
        cv2.rectangle(img, (cx - r, cy - t), (cx + r, cy + t), color, -1)
        cv2.rectangle(img, (cx - t, cy - r), (cx + t, cy + r), color, -1)
    else:
        cv2.ellipse(img, (cx, cy), (r, max(int(r * ar), 2)), 0, 0, 360, color, -1, cv2.LINE_AA)


def _np() -> Any:
    return importlib.import_module("numpy")  # lazily: `rig` stays importable without numpy


def _cv2() -> Any:
    return importlib.import_module("cv2")


def _box(cls: int, cx: int, cy: int, r: int, ar: float) -> tuple[int, int, int, int]:
    """The shape's pixel box (x0, y0, x1, y1), inclusive of anti-aliased edges."""
    ry = max(int(r * ar), 2) if cls == 4 else r
    return cx - r, cy - ry, cx + r, cy + ry


def _image(rng: Any, w: int, h: int) -> tuple[Any, list[tuple[int, float, float, float, float]]]:
    cv2, np = _cv2(), _np()
    # A shaded background with per-pixel noise, so the model cannot find shapes by flat colour.
    base = rng.integers(40, 200, size=3, dtype=np.int16)
    ramp = (np.linspace(-30, 30, w) * rng.choice([-1, 1])).astype(np.int16)[None, :, None]
    noise = rng.integers(-36, 37, size=(h, w, 3), dtype=np.int16)
    img = np.clip(base[None, None, :] + ramp + noise, 0, 255).astype(np.uint8)
    labels: list[tuple[int, float, float, float, float]] = []
    side = min(w, h)
    for _ in range(int(rng.integers(1, MAX_OBJECTS + 1))):
        cls = int(rng.integers(len(CLASSES)))
        r = int(rng.integers(side // 16, side // 6))
        cx, cy = int(rng.integers(r, w - r)), int(rng.integers(r, h - r))
        ar = float(rng.uniform(0.4, 0.8))
        color = tuple(int(c) for c in rng.integers(0, 256, size=3))
        _draw(cv2, img, cls, cx, cy, r, color, ar)
        x0, y0, x1, y1 = _box(cls, cx, cy, r, ar)
        x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1 + 1, w), min(y1 + 1, h)
        labels.append((cls, (x0 + x1) / 2 / w, (y0 + y1) / 2 / h, (x1 - x0) / w, (y1 - y0) / h))
    return img, labels


def _first_line(path: Path) -> str:
    try:
        with path.open() as f:
            return f.readline()
    except OSError:
        return ""


def make_demo_dataset(
    root: Path,
    *,
    train: int = 64,
    val: int = 16,
    imgsz: int = 320,
    height: int | None = None,
    seed: int = 0,
    force: bool = False,
) -> Path:
    """Write the dataset under root and return its data yaml path. Images are imgsz x height
    (width x height, square by default)."""
    cv2, np = _cv2(), _np()
    h = imgsz if height is None else height
    if train < 1 or val < 1 or min(imgsz, h) < 32:
        raise RigError(
            f"demo-data: need --train >= 1, --val >= 1 and sides >= 32 px (got {train}, {val}, {imgsz}x{h})"
        )
    root = root.absolute()
    data_yaml = root / YAML_NAME
    header = f"# rig demo-data: seed {seed}, {train} train / {val} val images at {imgsz}x{h} px\n"
    if root.exists() and any(root.iterdir()):
        if not force and _first_line(data_yaml) == header:
            _logger.info("%s already holds this demo dataset (--force regenerates it)", root)
            return data_yaml
        if not force:
            raise RigError(
                f"demo-data: {root} is not empty; choose another directory or pass --force to replace it"
            )
        if not _first_line(data_yaml).startswith("# rig demo-data"):
            raise RigError(
                f"demo-data: {root} holds no {YAML_NAME}; not made by rig demo-data, so not replacing it"
            )
        shutil.rmtree(root)
    tmp = root.with_name(f".{root.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    try:
        rng = np.random.default_rng(seed)
        for split, n in (("train", train), ("val", val)):
            (tmp / "images" / split).mkdir(parents=True)
            (tmp / "labels" / split).mkdir(parents=True)
            for i in range(n):
                img, labels = _image(rng, imgsz, h)
                name = f"{split}_{i:06d}"
                ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])
                if not ok:
                    raise RigError(f"demo-data: could not encode image {name}")
                (tmp / "images" / split / f"{name}.jpg").write_bytes(buf.tobytes())
                (tmp / "labels" / split / f"{name}.txt").write_text(
                    "".join(f"{c} {x:.6f} {y:.6f} {w:.6f} {h:.6f}\n" for c, x, y, w, h in labels)
                )
        # No path: the root is the yaml's own folder (Ultralytics' rule when path: is absent), so
        # the set trains wherever it is copied or mounted (rig.yolo.datasets).
        spec = {
            "train": "images/train",
            "val": "images/val",
            "names": dict(enumerate(CLASSES)),
        }
        (tmp / YAML_NAME).write_text(header + yaml.safe_dump(spec, sort_keys=False))
        if root.exists():  # an empty directory, possibly a mount point: move the contents in
            for child in tmp.iterdir():
                shutil.move(child, root / child.name)
            tmp.rmdir()
        else:
            root.parent.mkdir(parents=True, exist_ok=True)
            tmp.rename(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return data_yaml
