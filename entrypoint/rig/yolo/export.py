"""`rig export WEIGHTS`: ONNX export with simplification, checked against PyTorch with onnxruntime.

The check runs the exported graph and the PyTorch model (as trained: not fused, float32, CPU) on
the same letterboxed sample images and compares every output element. Each output channel (box
coordinates in pixels, class scores in [0, 1], ...) is compared relative to its own scale,
max(1, largest |value| in that channel), so one bound serves both: with the default 1e-3 a box
may move by 0.1 % of its coordinate range (under a pixel at 640 px) and a score by 0.001, far
below any confidence threshold, while a wrong op, opset or simplification shows up as errors of
order 1. Float32 round-off from BatchNorm fusion and graph rewrites is about 1e-6 of scale.
"""

import importlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig import log, paths
from rig.errors import RigError
from rig.yolo import contract, datasets, ultra

_logger = log.get("export")

DEFAULT_RTOL = 1e-3
DEMO_IMAGES = paths.DEMO_DATASET / "images/val"
FORMATS = ("onnx",)


@dataclass(frozen=True)
class Comparison:
    """How far the exported outputs are from PyTorch's, over every sample image and output."""

    max_abs: float  # largest |exported - pytorch|
    max_scaled: float  # largest |exported - pytorch| / its channel's scale
    images: int

    def within(self, rtol: float) -> bool:
        return self.max_scaled <= rtol


@dataclass(frozen=True)
class ExportResult:
    path: Path
    comparison: Comparison
    rtol: float


def _np() -> Any:
    return importlib.import_module("numpy")  # lazily: host tests import rig without numpy


def channel_scale(reference: Any) -> Any:
    """max(1, max |value|) per channel (axis 1), broadcastable against reference."""
    np = _np()
    ref = np.abs(np.asarray(reference, dtype=np.float64))
    if ref.ndim < 2:
        return np.maximum(1.0, ref.max(initial=0.0))
    axes = tuple(i for i in range(ref.ndim) if i != 1)
    return np.maximum(1.0, ref.max(axis=axes, keepdims=True, initial=0.0))


def compare(pairs: Iterable[tuple[Any, Any]], images: int) -> Comparison:
    """Compare (pytorch, exported) output arrays; shapes must match."""
    np = _np()
    max_abs = max_scaled = 0.0
    for reference, exported in pairs:
        ref = np.asarray(reference, dtype=np.float64)
        got = np.asarray(exported, dtype=np.float64)
        if ref.shape != got.shape:
            raise RigError(f"exported output has shape {got.shape}, PyTorch's has {ref.shape}")
        diff = np.abs(got - ref)
        if not np.isfinite(diff).all():
            return Comparison(float("inf"), float("inf"), images)
        max_abs = max(max_abs, float(diff.max(initial=0.0)))
        max_scaled = max(max_scaled, float((diff / channel_scale(ref)).max(initial=0.0)))
    return Comparison(max_abs, max_scaled, images)


def find_images(given: Sequence[Path], limit: int, fallback: Sequence[Path] = (DEMO_IMAGES,)) -> list[Path]:
    """Sample images: those given (files or folders), else the first folder of fallback that has any."""

    def collect(paths: Iterable[Path]) -> list[Path]:
        found: list[Path] = []
        for p in paths:
            if p.is_dir():
                found += sorted(f for f in p.rglob("*") if f.is_file() and datasets.is_image(f))
            elif p.is_file():
                found.append(p)
        return found[:limit]

    if given:
        missing = [str(p) for p in given if not p.exists()]
        if missing:
            raise RigError(f"no such file or folder: {', '.join(missing)}", option="--images")
        found = collect(given)
        if not found:
            suffixes = ", ".join(f".{s}" for s in sorted(ultra.image_formats()))
            raise RigError(f"no images ({suffixes}) in {given[0]}", option="--images")
        return found
    for folder in fallback:
        found = collect([folder])
        if found:
            return found
    return []


def _flatten(outputs: Any) -> list[Any]:
    if isinstance(outputs, list | tuple):
        return [t for o in outputs for t in _flatten(o)]
    if isinstance(outputs, dict):
        return [t for o in outputs.values() for t in _flatten(o)]
    return [outputs] if hasattr(outputs, "shape") else []


def _match(reference: list[Any], exported: list[Any]) -> list[tuple[Any, Any]]:
    """Pair each exported output with the first unused PyTorch output of the same shape."""
    unused = list(reference)
    pairs = []
    for i, got in enumerate(exported):
        hit = next((r for r in unused if tuple(r.shape) == tuple(got.shape)), None)
        if hit is None:
            shapes = [tuple(r.shape) for r in reference]
            raise RigError(f"exported output {i} {tuple(got.shape)} matches no PyTorch output {shapes}")
        unused.remove(hit)
        pairs.append((hit, got))
    return pairs


def _preprocess(path: Path, imgsz: tuple[int, int], stride: int) -> Any:
    """The predictor's preprocessing: letterbox to imgsz, BGR to RGB, CHW, [0, 1], a batch of one."""
    np = _np()
    cv2 = importlib.import_module("cv2")
    augment = ultra.augment()
    image = cv2.imread(str(path))
    if image is None:
        raise RigError(f"cannot read image {path}")
    boxed = augment.LetterBox(new_shape=imgsz, auto=False, stride=stride)(image=image)
    chw = boxed[..., ::-1].transpose(2, 0, 1)
    return np.ascontiguousarray(chw, dtype=np.float32)[None] / 255.0


def _train_imgsz(model: contract.Model) -> int | list[int]:
    ckpt: contract.Checkpoint = model.ckpt or {}
    train_args: contract.TrainArgs = ckpt.get("train_args") or {}
    imgsz = train_args.get("imgsz", ultra.DEFAULT_IMGSZ)
    return imgsz if isinstance(imgsz, int | list) else ultra.DEFAULT_IMGSZ


def export_onnx(
    weights: Path,
    *,
    imgsz: int | None = None,
    images: Sequence[Path] = (),
    max_images: int = 8,
    rtol: float = DEFAULT_RTOL,
    opset: int | None = None,
) -> ExportResult:
    """Export weights to ONNX (simplified) next to them, then check it; raise RigError if off."""
    if not weights.is_file():
        raise RigError(f"no weights at {weights}; give the path of a .pt file (e.g. runs/.../best.pt)")
    if weights.suffix != ".pt":
        raise RigError(f"{weights} is not a PyTorch .pt file; rig export starts from the trained .pt")
    if not os.access(weights.parent, os.W_OK):
        raise RigError(f"cannot write the .onnx next to {weights}; copy it to a writable folder first")
    samples = find_images(images, max_images)
    if not samples:
        assets = Path(ultra.utils().ASSETS)
        samples = find_images((), max_images, fallback=(assets,))
    if not samples:
        raise RigError("no sample images to check the export with; pass --images DIR")

    np = _np()
    torch = importlib.import_module("torch")
    ort = importlib.import_module("onnxruntime")

    try:
        model = ultra.yolo(str(weights))
    except Exception as e:  # a truncated download, a plain state_dict, another library's checkpoint
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]  # one line: Ultralytics' are long
        raise RigError(f"cannot load {weights} as Ultralytics weights: {reason}") from None
    size = imgsz if imgsz is not None else _train_imgsz(model)
    onnx_path = Path(
        model.export(format="onnx", simplify=True, imgsz=size, dynamic=False, device="cpu", opset=opset)
    )
    # A fresh, unfused float32 copy: export fuses and patches the model it was given.
    reference_model = ultra.yolo(str(weights)).model.float().eval()
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    net_input = session.get_inputs()[0]
    hw = (int(net_input.shape[2]), int(net_input.shape[3]))
    stride = int(max(getattr(reference_model, "stride", np.array([32])).max(), 32))

    pairs = []
    with torch.inference_mode():
        for path in samples:
            x = _preprocess(path, hw, stride)
            exported = session.run(None, {net_input.name: x})
            reference = [t.numpy() for t in _flatten(reference_model(torch.from_numpy(x)))]
            pairs += _match(reference, exported)
    result = ExportResult(onnx_path, compare(pairs, len(samples)), rtol)
    c = result.comparison
    summary = (
        f"{onnx_path.name} vs PyTorch on {c.images} images at {hw[0]}x{hw[1]}: "
        f"largest |difference| {c.max_abs:.3g}, relative to output scale {c.max_scaled:.3g} (bound {rtol:g})"
    )
    if not c.within(rtol):
        onnx_path.unlink(missing_ok=True)
        raise RigError(f"export check failed: {summary}; removed {onnx_path}")
    _logger.info("%s", summary)
    return result
