"""Mosaic's canvas and RandomPerspective's warp for a packed batch (rig.yolo.augment.warp_job), on any
device.

The torch kernels compute what OpenCV 4.11's `warpAffine`/`warpPerspective` compute for 8-bit
images with INTER_LINEAR and a constant border, in the same arithmetic, so the pixels are the same:
  1. the inverse matrix is OpenCV's own (taken in the worker);
  2. each output pixel's source position, in 1/32 pixel: for an affine warp
     round(M0 x 1024) + round((M1 y + M2) 1024) + 16, then >> 5 (OpenCV's AB_BITS and INTER_BITS);
     for a perspective one round((M0 x + M1 y + M2) 32 / (M6 x + M7 y + M8)); float64, rounded
     half to even as cvRound;
  3. the four neighbours from the canvas (its tiles where they lie, 114 elsewhere and outside it),
     blended with OpenCV's fixed-point bilinear weights (15 bits: (32 - fx)(32 - fy) 32 ...), then
     (sum + 2^14) >> 15: integers from the position on, exact on any device.
The canvas is only the window each image reads, built on the device from the packed tiles. On a
CPU ("opencv") it is Ultralytics' own call on a canvas of the full size (bit-exact by construction).

torch is imported by the functions, never at module import: `rig` stays importable without it.
"""

from __future__ import annotations

import importlib
from typing import Any

from rig.yolo.augment import warp_job as wj

INTER_BITS, AB_SCALE = 5, 1 << 10  # OpenCV's imgwarp.cpp: 1/32 pixel, coordinates in 1/1024
TAB = 1 << INTER_BITS
COEF_SHIFT = 15  # INTER_REMAP_COEF_BITS
CHUNK_PIXELS = 1 << 23  # output pixels per round of the kernels (20 images at 640 px): bounds their memory


def _torch() -> Any:
    return importlib.import_module("torch")


def render(flat: Any, geom: Any, tiles: Any, device: Any, kernels: str | None = None) -> Any:
    """A packed batch -> (N, H, W, C) uint8 on device, the images Ultralytics' Mosaic and
    RandomPerspective would have made (before HSV, flips and layout). kernels: "torch", or "opencv"
    (Ultralytics' own calls, image by image, for a CPU); None picks by the device."""
    torch = _torch()
    device = torch.device(device)
    g = geom.to(torch.float64).cpu()
    kernels = kernels or ("opencv" if device.type == "cpu" else "torch")
    by_image: list[list[tuple[int, int, int, int, int]]] = [[] for _ in range(g.shape[0])]
    for n, x, y, w, h, o in tiles.tolist():
        by_image[n].append((x, y, w, h, o))
    sizes = {(int(r[wj.OUT_W]), int(r[wj.OUT_H]), int(r[wj.CHANNELS])) for r in g.tolist()}
    if len(sizes) != 1:
        raise ValueError(f"a batch's images differ in size or channels: {sorted(sizes)}")
    ((width, height, channels),) = sizes
    if kernels == "opencv":
        return _render_opencv(flat, g, by_image, (width, height, channels))
    src = flat.to(device, non_blocking=device.type != "cpu")
    out = torch.empty((g.shape[0], height, width, channels), dtype=torch.uint8, device=device)
    step = max(1, CHUNK_PIXELS // (height * width))
    for lo in range(0, g.shape[0], step):
        hi = min(lo + step, g.shape[0])
        out[lo:hi] = _render_torch(src, g[lo:hi], by_image[lo:hi], (width, height, channels), device)
    return out


def _canvases(src: Any, g: Any, by_image: list[Any], channels: int, device: Any) -> tuple[Any, list[int]]:
    """Every image's window of its canvas, one after the other, (pixels + 1, C): 114 where no tile
    lies, and one more pixel of 114 at the end for every read outside a window. The tiles are
    scattered in one operation whatever their number (a 2x2 mosaic's tiles never overlap), so the
    host's work does not grow with the batch."""
    torch = _torch()
    rows = g.tolist()
    areas = [int(r[wj.WIN_W]) * int(r[wj.WIN_H]) for r in rows]
    bases = [sum(areas[:k]) for k in range(len(areas))]
    canvas = torch.full((sum(areas) + 1, channels), wj.FILL, dtype=torch.uint8, device=device)
    # Per tile: its first pixel in the packed bytes, width, height, its first pixel on the canvas, the
    # width of its image's window.
    table = []
    for k, row in enumerate(rows):
        wx, wy, ww = (int(v) for v in row[wj.WIN_X : wj.WIN_X + 3])
        for x, y, w, h, o in by_image[k]:
            table.append((o // channels, w, h, bases[k] + (y - wy) * ww + (x - wx), ww))
    if not table:
        return canvas, bases
    t = torch.tensor(table, dtype=torch.int64).to(device, non_blocking=True)
    counts = t[:, 1] * t[:, 2]
    total = sum(w * h for _, w, h, _, _ in table)
    tile = torch.repeat_interleave(torch.arange(len(table), device=device), counts, output_size=total)
    local = torch.arange(total, device=device) - (torch.cumsum(counts, 0) - counts)[tile]
    width = t[tile, 1]
    row_in_tile = torch.div(local, width, rounding_mode="floor")
    target = t[tile, 3] + row_in_tile * t[tile, 4] + (local - row_in_tile * width)
    canvas[target] = src.view(-1, channels)[t[tile, 0] + local]
    return canvas, bases


def source_positions(inverse: Any, size: tuple[int, int], perspective: bool) -> tuple[Any, Any]:
    """(N, H, W) int64 source positions in 1/32 pixel, as OpenCV computes them; inverse (N, 9) float64."""
    torch = _torch()
    width, height = size
    m = [inverse[:, i].view(-1, 1, 1) for i in range(9)]
    x = torch.arange(width, dtype=torch.float64, device=inverse.device).view(1, 1, -1)
    y = torch.arange(height, dtype=torch.float64, device=inverse.device).view(1, -1, 1)
    if not perspective:  # WarpAffineInvoker: one product per column, one per row, each rounded
        half = AB_SCALE // TAB // 2
        xs = torch.round(x * m[0] * AB_SCALE).long() + (
            torch.round((y * m[1] + m[2]) * AB_SCALE).long() + half
        )
        ys = torch.round(x * m[3] * AB_SCALE).long() + (
            torch.round((y * m[4] + m[5]) * AB_SCALE).long() + half
        )
        return xs >> (10 - INTER_BITS), ys >> (10 - INTER_BITS)
    w = (y * m[7] + m[8]) + x * m[6]  # WarpPerspectiveInvoker
    w = torch.where(w != 0, TAB / torch.where(w != 0, w, torch.ones_like(w)), torch.zeros_like(w))
    limit = float(2**31 - 1)
    xs = torch.round((((y * m[1] + m[2]) + x * m[0]) * w).clamp(-limit - 1, limit)).long()
    ys = torch.round((((y * m[4] + m[5]) + x * m[3]) * w).clamp(-limit - 1, limit)).long()
    return xs, ys


def _render_torch(src: Any, g: Any, by_image: list[Any], shape: tuple[int, int, int], device: Any) -> Any:
    torch = _torch()
    width, height, channels = shape
    canvas, bases = _canvases(src, g, by_image, channels, device)
    outside = canvas.shape[0] - 1
    perspective = bool(g[0, wj.PERSPECTIVE])
    inverse = g[:, wj.INVERSE : wj.INVERSE + 9].to(device)
    xs, ys = source_positions(inverse, (width, height), perspective)
    win = g[:, wj.WIN_X : wj.WIN_X + 4].to(device=device, dtype=torch.int64).view(-1, 4, 1, 1)
    base = torch.tensor(bases, dtype=torch.int64, device=device).view(-1, 1, 1)
    wx, wy, ww, wh = win.unbind(1)
    cx, cy = (xs >> INTER_BITS) - wx, (ys >> INTER_BITS) - wy  # on the window
    fx = (xs & (TAB - 1)).to(torch.int32).unsqueeze(-1)
    fy = (ys & (TAB - 1)).to(torch.int32).unsqueeze(-1)
    del xs, ys

    def pixel(dx: int, dy: int) -> Any:
        px, py = cx + dx, cy + dy
        inside = (px >= 0) & (px < ww) & (py >= 0) & (py < wh)
        index = torch.where(inside, base + py * ww + px, outside)
        return canvas[index].to(torch.int32)  # (n, H, W, C)

    # OpenCV's weights are (32 - fx)(32 - fy) 32, fx (32 - fy) 32, ...: the same integer sum, grouped.
    top = pixel(0, 0) * (TAB - fx) + pixel(1, 0) * fx
    bottom = pixel(0, 1) * (TAB - fx) + pixel(1, 1) * fx
    total = (top * (TAB - fy) + bottom * fy) * TAB
    return ((total + (1 << (COEF_SHIFT - 1))) >> COEF_SHIFT).clamp_(0, 255).to(torch.uint8)


def _render_opencv(flat: Any, g: Any, by_image: list[Any], shape: tuple[int, int, int]) -> Any:
    """Ultralytics' Mosaic canvas and RandomPerspective.apply_image's call, image by image."""
    np: Any = importlib.import_module("numpy")
    cv2: Any = importlib.import_module("cv2")
    width, height, channels = shape
    data = flat.numpy()
    out = np.empty((g.shape[0], height, width, channels), dtype=np.uint8)
    border = (wj.FILL,) * 4  # as Ultralytics passes it: every channel, multispectral too
    for k, row in enumerate(g.tolist()):
        canvas = np.full((int(row[wj.CANVAS_H]), int(row[wj.CANVAS_W]), channels), wj.FILL, dtype=np.uint8)
        for x, y, w, h, o in by_image[k]:
            canvas[y : y + h, x : x + w] = data[o : o + h * w * channels].reshape(h, w, channels)
        matrix = np.array(row[wj.MATRIX : wj.MATRIX + 9], dtype=np.float64).reshape(3, 3)
        if row[wj.PERSPECTIVE]:
            img = cv2.warpPerspective(canvas, matrix, dsize=(width, height), borderValue=border)
        else:
            img = cv2.warpAffine(canvas, matrix[:2], dsize=(width, height), borderValue=border)
        out[k] = img.reshape(height, width, channels)
    return _torch().from_numpy(out)
