"""Ultralytics' RandomHSV and Format image steps as batched torch operations, on any device.

What a training worker used to do per image on the CPU (ultralytics.data.augment.RandomHSV.apply_image,
then Format._format_img) done here for a whole batch where the batch is going anyway:
  1. BGR -> HSV as OpenCV's 8-bit `cvtColor(COLOR_BGR2HSV)` computes it: integer arithmetic with its
     12-bit division tables, H in 0..179 (bit-exact);
  2. the three lookup tables Ultralytics builds from the gains (built on the host in float64 exactly
     as numpy builds them, so they are bit-exact too), applied per image;
  3. HSV -> BGR as OpenCV's 8-bit `cvtColor(COLOR_HSV2BGR)` computes it in its vector path (which
     takes every pixel but a row's last few): float32 sectors, truncated to 0..255. Its scalar path,
     for those few, rounds instead: there the result may differ by one level;
  4. the BGR -> RGB flip where Format drew it, RandomFlip's pixel reversal where it flipped (its
     draw and the labels stay in the worker), and HWC -> CHW.
Images whose gains Ultralytics would not have applied (zero gains, not 3 channels) skip 1-3, as they
skip the round trip through HSV there.

torch is imported by the functions, never at module import: `rig` stays importable without it.
"""

from __future__ import annotations

import importlib
from typing import Any

HSV_SHIFT = 12  # OpenCV's fixed-point shift in RGB2HSV_b
HUE_RANGE = 180  # COLOR_BGR2HSV (not _FULL): H in 0..179
# Per hue sector, which of (v, v(1-s), v(1-s*f), v(1-s(1-f))) is B, G and R: OpenCV's sector_data.
SECTORS = ((1, 3, 0), (1, 0, 2), (3, 0, 1), (0, 2, 1), (0, 1, 3), (2, 1, 0))
# One row per image, as the workers hand them over:
# [hsv applied, h gain, s gain, v gain, to RGB, reverse the width, reverse the height].
PARAMS = 7


def _torch() -> Any:
    return importlib.import_module("torch")


def division_tables(device: Any) -> tuple[Any, Any]:
    """OpenCV's sdiv_table and hdiv_table180: round((255 << 12) / i) and round((180 << 12) / (6 i)),
    0 at i = 0, rounded half to even as its saturate_cast<int>(double) does."""
    torch = _torch()
    i = torch.arange(256, dtype=torch.float64)
    sdiv = torch.round((255 << HSV_SHIFT) / i)
    hdiv = torch.round((HUE_RANGE << HSV_SHIFT) / (6.0 * i))
    sdiv[0] = hdiv[0] = 0
    return sdiv.to(device=device, dtype=torch.int32), hdiv.to(device=device, dtype=torch.int32)


def bgr_to_hsv(img: Any) -> Any:
    """(..., 3) uint8 BGR -> (..., 3) int32 HSV, equal to cv2.cvtColor(img, cv2.COLOR_BGR2HSV)."""
    torch = _torch()
    sdiv, hdiv = division_tables(img.device)
    x = img.to(torch.int32)
    b, g, r = x.unbind(-1)
    v = torch.maximum(torch.maximum(b, g), r)
    diff = v - torch.minimum(torch.minimum(b, g), r)
    half = 1 << (HSV_SHIFT - 1)
    s = (diff * sdiv[v.long()] + half) >> HSV_SHIFT
    h = torch.where(v == r, g - b, torch.where(v == g, b - r + 2 * diff, r - g + 4 * diff))
    h = (h * hdiv[diff.long()] + half) >> HSV_SHIFT  # an arithmetic shift: floor, as OpenCV's
    h = torch.where(h < 0, h + HUE_RANGE, h).clamp_(0, 255)
    return torch.stack((h, s, v), -1)


def hsv_luts(gains: Any) -> Any:
    """(N, 3) float64 gains -> (N, 3, 256) uint8: Ultralytics' lut_hue, lut_sat, lut_val per image,
    computed in float64 with numpy's operations (its % is fmod, then + 180 for a negative rest)."""
    torch = _torch()
    g = gains.to(torch.float64)
    x = torch.arange(256, dtype=torch.float64)
    hue = torch.fmod(x + (g[:, 0:1] * HUE_RANGE), HUE_RANGE)
    hue = torch.where(hue < 0, hue + HUE_RANGE, hue)
    sat = torch.clamp(x * (g[:, 1:2] + 1), 0, 255)
    val = torch.clamp(x * (g[:, 2:3] + 1), 0, 255)
    luts = torch.stack((hue, sat, val), 1).to(torch.uint8)  # truncation, as numpy's astype
    luts[:, 1, 0] = 0  # Ultralytics: pure white keeps its colour
    return luts


def hsv_to_bgr(hsv: Any) -> Any:
    """(N, H, W, 3) integer HSV (H 0..179) -> uint8 BGR, as cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)."""
    torch = _torch()
    f32 = torch.float32
    dev = hsv.device
    h, s, v = hsv.unbind(-1)
    s = s.to(f32) * torch.tensor(1.0 / 255.0, dtype=f32, device=dev)
    v = v.to(f32) * torch.tensor(1.0 / 255.0, dtype=f32, device=dev)
    h = h.to(f32) * torch.tensor(6.0 / HUE_RANGE, dtype=f32, device=dev)  # 0 <= h < 6: H is 0..179
    sector = torch.trunc(h)
    frac = h - sector
    one = torch.ones((), dtype=f32, device=dev)
    # Each product and difference its own float32 rounding, as the vector intrinsics do (no fused
    # multiply-add: one eager torch operation each).
    tab = torch.stack((v, v * (one - s), v * (one - s * frac), v * (one - s * (one - frac))), -1)
    pick = torch.tensor(SECTORS, device=dev)[sector.long().clamp_(0, 5)]  # which tab is B, G, R
    bgr = torch.gather(tab, -1, pick)
    return torch.trunc(bgr * torch.tensor(255.0, dtype=f32, device=dev)).clamp_(0, 255).to(torch.uint8)


def apply_luts(hsv: Any, luts: Any) -> Any:
    """Per image n, channel c: hsv[n, ..., c] -> luts[n, c, hsv[n, ..., c]]."""
    torch = _torch()
    n = hsv.shape[0]
    flat = hsv.reshape(n, -1, 3).long()
    out = torch.stack([torch.gather(luts[:, c].long(), 1, flat[..., c]) for c in range(3)], -1)
    return out.reshape(hsv.shape)


def tail(img: Any, params: Any, kernels: str | None = None) -> Any:
    """The moved work for one batch: (N, H, W, C) uint8 BGR from the workers and their (N, PARAMS)
    rows -> (N, C, H, W) uint8, what Ultralytics' Format would have stacked, on img's device.

    kernels: "torch" (these batched operations) or "opencv" (Ultralytics' own calls, image by image,
    for a CPU, where the batched form only adds memory traffic); None picks by img's device."""
    torch = _torch()
    params = params.to(torch.float64).cpu()
    applied = params[:, 0] > 0
    to_rgb = params[:, 4] > 0
    flip_w, flip_h = params[:, 5] > 0, params[:, 6] > 0
    kernels = kernels or ("opencv" if img.device.type == "cpu" else "torch")
    out = img
    if img.shape[-1] == 3 and bool(applied.any()):
        idx = applied.nonzero().squeeze(1)
        luts = hsv_luts(params[idx, 1:4])
        if kernels == "opencv":
            out = _hsv_opencv(img, idx.tolist(), luts)
        else:
            dev_idx = idx.to(img.device)
            changed = hsv_to_bgr(apply_luts(bgr_to_hsv(img[dev_idx]), luts.to(img.device)))
            out = img.index_copy(0, dev_idx, changed) if len(idx) < img.shape[0] else changed
    to_rgb &= img.shape[-1] == 3
    if kernels == "opencv":
        return _layout_numpy(out, to_rgb.tolist(), flip_w.tolist(), flip_h.tolist())
    for dim, mask in ((3, to_rgb), (2, flip_w), (1, flip_h)):  # channels, width, height (NHWC)
        if bool(mask.any()):
            out = torch.where(mask.to(img.device).view(-1, 1, 1, 1), out.flip(dim), out)
    return out.permute(0, 3, 1, 2).contiguous()


def _layout_numpy(img: Any, to_rgb: list[bool], flip_w: list[bool], flip_h: list[bool]) -> Any:
    """HWC -> CHW with the reversals drawn: one strided copy per image, as Format's own."""
    np: Any = importlib.import_module("numpy")
    arr = img.numpy()
    n, h, w, c = arr.shape
    out = np.empty((n, c, h, w), dtype=arr.dtype)
    for i in range(n):
        step = (-1 if to_rgb[i] else 1, -1 if flip_h[i] else 1, -1 if flip_w[i] else 1)
        out[i] = arr[i].transpose(2, 0, 1)[:: step[0], :: step[1], :: step[2]]
    return _torch().from_numpy(out)


def _hsv_opencv(img: Any, indices: list[int], luts: Any) -> Any:
    """RandomHSV.apply_image's calls on a CPU batch, in place: the batch is the collate's own copy."""
    cv2: Any = importlib.import_module("cv2")
    arr = img.numpy()
    tables = luts.permute(0, 2, 1).contiguous().numpy()  # (N, 256, 3): Ultralytics' stacked LUT
    for k, i in enumerate(indices):
        hsv = cv2.cvtColor(arr[i], cv2.COLOR_BGR2HSV)
        cv2.cvtColor(cv2.LUT(hsv, tables[k].reshape(1, 256, 3)), cv2.COLOR_HSV2BGR, dst=arr[i])
    return img
