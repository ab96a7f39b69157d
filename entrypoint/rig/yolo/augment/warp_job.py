"""Mosaic's canvas and RandomPerspective's warp as a value a loader worker hands over, not as pixels.

Ultralytics' Mosaic fills a 2s x 2s canvas with 114 and copies four images' regions onto it;
RandomPerspective then warps the canvas (`cv2.warpAffine`, or `warpPerspective`, INTER_LINEAR,
border 114) into the training size; without mosaic (its coin, `close_mosaic`, rect batches) the
warp takes the loaded image alone, which is how training letterboxes. A `WarpJob` is that canvas
before it exists: its tiles (views of the loaded images, nothing copied; a 2x2 mosaic's four
quadrants never overlap), the matrix Ultralytics drew and the output size. Once the matrix is
known the job keeps only the part of the canvas the warp can read (the window: the output's corners
mapped back, plus a margin), so a worker copies about the output's own size, once, into the batch
(`pack`). RandomFlip's reversals are recorded, not done. rig.yolo.augment.warp renders a packed
batch on the training device.

numpy, OpenCV and torch are imported by the functions: `rig` stays importable without them.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from typing import Any

FILL = 114  # Mosaic's canvas and the warp's border value, in every channel
GEOM = "rig_warp"  # per image: one row of the fields below
TILES = "rig_warp_tiles"  # per tile: (image, x, y, width, height, offset in the packed bytes)
# The row of each image, float64: what the device needs and what OpenCV needs (the CPU path).
CHANNELS, CANVAS_W, CANVAS_H, OUT_W, OUT_H, PERSPECTIVE, WIN_X, WIN_Y, WIN_W, WIN_H = range(10)
MATRIX = 10  # 9 values: Ultralytics' 3x3 matrix (float32 values), canvas -> output
INVERSE = 19  # 9 values: OpenCV's own inverse of it (invertAffineTransform, or invert), output -> canvas
ROW = 28
# Pixels the window keeps around the mapped corners: OpenCV rounds the mapped coordinates to 1/32
# pixel (a few thousandths of a pixel from the exact ones) and reads the pixel right and below.
MARGIN = 2


def _np() -> Any:
    return importlib.import_module("numpy")


@dataclass
class Tile:
    pixels: Any  # (h, w, C) view of a loaded image
    x: int  # its top-left corner on the canvas
    y: int


@dataclass
class WarpJob:
    """One training image before its pixels exist (see the module's docstring)."""

    tiles: list[Tile]
    canvas_w: int
    canvas_h: int
    channels: int
    matrix: Any = None  # Ultralytics' M (3x3 float32), set by warp()
    inverse: Any = None  # 3x3 float64, OpenCV's
    size: tuple[int, int] | None = None  # the output's (w, h)
    perspective: bool = False
    window: tuple[int, int, int, int] = (0, 0, 0, 0)  # x, y, w, h on the canvas
    flip_w: bool = False
    flip_h: bool = False
    _shape: tuple[int, int, int] = field(init=False, default=(0, 0, 0))

    def __post_init__(self) -> None:
        self._shape = (self.canvas_h, self.canvas_w, self.channels)
        self.window = (0, 0, self.canvas_w, self.canvas_h)

    @property
    def shape(self) -> tuple[int, int, int]:
        """What `labels["img"].shape` would be at this point of Ultralytics' pipeline (HWC)."""
        return self._shape

    @classmethod
    def single(cls, img: Any) -> WarpJob:
        """The warp of one loaded image (no mosaic): a canvas that is the image."""
        img = _np().asarray(img)  # a node cache's memmap: a plain view (memmap's views cost more)
        if img.ndim == 2:
            img = img[..., None]
        h, w, c = img.shape
        return cls([Tile(img, 0, 0)], w, h, c)

    def warp(self, matrix: Any, size: tuple[int, int], perspective: bool) -> None:
        """RandomPerspective's warp, recorded: the output is size (w, h)."""
        np = _np()
        cv2: Any = importlib.import_module("cv2")
        self.matrix = np.asarray(matrix, dtype=np.float32)
        m64 = self.matrix.astype(np.float64)
        if perspective:  # what cv2.warpPerspective inverts with (DECOMP_LU) and what warpAffine does
            self.inverse = cv2.invert(m64)[1]
        else:
            self.inverse = np.vstack([cv2.invertAffineTransform(m64[:2]), [0.0, 0.0, 1.0]])
        self.size, self.perspective = (int(size[0]), int(size[1])), bool(perspective)
        self.window = read_window(self.inverse, self.size, (self.canvas_w, self.canvas_h), perspective)
        self.tiles = [t for t in (_crop(t, self.window) for t in self.tiles) if t is not None]
        self._shape = (self.size[1], self.size[0], self.channels)

    def flip(self, direction: str) -> None:
        """RandomFlip's reversal of the output, left to the device."""
        if direction == "horizontal":
            self.flip_w = not self.flip_w
        else:
            self.flip_h = not self.flip_h

    def row(self) -> list[float]:
        assert self.size is not None and self.matrix is not None, "a WarpJob is packed after its warp"
        head = (self.channels, self.canvas_w, self.canvas_h, *self.size, self.perspective, *self.window)
        values = [*head, *self.matrix.ravel().tolist(), *self.inverse.ravel().tolist()]
        return [float(v) for v in values]


def read_window(
    inverse: Any, size: tuple[int, int], canvas: tuple[int, int], perspective: bool
) -> tuple[int, int, int, int]:
    """The canvas rectangle (x, y, w, h) that holds every canvas pixel the warp reads: the output's
    corners mapped back (an affine map, or a projective one positive over the output, takes a
    rectangle's extremes to its corners), MARGIN around, cut to the canvas. The whole canvas when
    the map is degenerate there."""
    w, h = size
    cw, ch = canvas
    xs, ys = [], []
    for x, y in ((0, 0), (w - 1, 0), (0, h - 1), (w - 1, h - 1)):
        sx, sy, sw = (float(inverse[r][0] * x + inverse[r][1] * y + inverse[r][2]) for r in range(3))
        if not perspective:
            sw = 1.0
        if not (sw > 0 and math.isfinite(sx / sw) and math.isfinite(sy / sw)):
            return (0, 0, cw, ch)
        xs.append(sx / sw)
        ys.append(sy / sw)
    x0, y0 = max(math.floor(min(xs)) - MARGIN, 0), max(math.floor(min(ys)) - MARGIN, 0)
    x1, y1 = min(math.floor(max(xs)) + MARGIN + 1, cw), min(math.floor(max(ys)) + MARGIN + 1, ch)
    return (x0, y0, max(x1 - x0, 0), max(y1 - y0, 0))


def _crop(tile: Tile, window: tuple[int, int, int, int]) -> Tile | None:
    wx, wy, ww, wh = window
    th, tw = tile.pixels.shape[:2]
    x0, y0 = max(tile.x, wx), max(tile.y, wy)
    x1, y1 = min(tile.x + tw, wx + ww), min(tile.y + th, wy + wh)
    if x1 <= x0 or y1 <= y0:
        return None
    return Tile(tile.pixels[y0 - tile.y : y1 - tile.y, x0 - tile.x : x1 - tile.x], x0, y0)


def pack(jobs: list[WarpJob]) -> dict[str, Any]:
    """A batch's jobs as three tensors: "img" (every tile's bytes, one after the other, uint8),
    GEOM (N, ROW) float64 and TILES (T, 6) int64. The tiles' pixels are copied here, once."""
    np = _np()
    torch: Any = importlib.import_module("torch")
    tiles: list[tuple[int, int, int, int, int, int]] = []
    offset = 0
    for n, job in enumerate(jobs):
        for t in job.tiles:
            th, tw = t.pixels.shape[:2]
            tiles.append((n, t.x, t.y, tw, th, offset))
            offset += th * tw * job.channels
    flat = _bytes(torch, offset)
    out = flat.numpy()
    for (n, _, _, tw, th, o), t in zip(tiles, (t for job in jobs for t in job.tiles), strict=True):
        c = jobs[n].channels
        out[o : o + th * tw * c].reshape(th, tw, c)[...] = t.pixels.reshape(th, tw, c)
    return {
        "img": flat,
        GEOM: torch.tensor(np.array([job.row() for job in jobs], dtype=np.float64).reshape(-1, ROW)),
        TILES: torch.tensor(tiles, dtype=torch.int64).reshape(-1, 6),
    }


def _bytes(torch: Any, size: int) -> Any:
    """A uint8 tensor of size bytes; in a loader worker made in shared memory, as torch's own
    default_collate makes a batch there: handing the batch to the trainer then copies nothing."""
    empty = torch.empty(0, dtype=torch.uint8)
    if torch.utils.data.get_worker_info() is None:
        return torch.empty(size, dtype=torch.uint8)
    storage = empty._typed_storage()._new_shared(size, device="cpu")
    return empty.new(storage).resize_(size)
