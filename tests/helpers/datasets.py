"""The one fake dataset for host tests: an Ultralytics detection layout with tiny stand-in images."""

from __future__ import annotations

from pathlib import Path


def make_dataset(root: Path, n_train: int = 20, *, layout: str = "dir", path: str | None = None) -> Path:
    """images/train/{i}.jpg (1000 + i bytes each, not real JPEGs), a non-image file beside them, and
    data.yaml; layout "txt" lists the images in train.txt. path: the yaml's `path:` (default: root).
    Returns the yaml."""
    images = root / "images/train"
    images.mkdir(parents=True)
    for i in range(n_train):
        (images / f"{i}.jpg").write_bytes(bytes(1000 + i))
    (images / "notes.md").write_text("not an image")
    train = "images/train"
    if layout == "txt":
        (root / "train.txt").write_text("".join(f"./images/train/{i}.jpg\n" for i in range(n_train)))
        train = "train.txt"
    (root / "data.yaml").write_text(f"path: {path or root}\ntrain: {train}\nval: {train}\nnames: {{0: a}}\n")
    return root / "data.yaml"
