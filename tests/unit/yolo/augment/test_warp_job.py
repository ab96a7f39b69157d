"""rig.yolo.augment.warp_job's window: every canvas pixel OpenCV's warp reads lies in it (the device renders
only the window, so a pixel outside it would come out as the border). The pixel equality itself runs
in the image (tests/image/test_device_augment.py); here the positions are OpenCV's integer
arithmetic written out in Python, as rig.yolo.augment.warp computes them."""

from __future__ import annotations

import math
import random

import pytest
from rig.yolo.augment import warp_job


def affine_inverse(
    angle: float, scale: float, centre: tuple[float, float], size: tuple[int, int]
) -> list[list[float]]:
    """Output -> canvas: a rotation and scale, the output's centre landing on `centre`."""
    a, b = math.cos(math.radians(angle)) / scale, math.sin(math.radians(angle)) / scale
    cx, cy = size[0] / 2, size[1] / 2
    return [[a, -b, centre[0] - a * cx + b * cy], [b, a, centre[1] - b * cx - a * cy], [0.0, 0.0, 1.0]]


def read_pixels(inv: list[list[float]], size: tuple[int, int]) -> tuple[set[int], set[int]]:
    """The columns and rows cv2.warpAffine (INTER_LINEAR) reads: the 1/32-pixel positions of
    WarpAffineInvoker (round half to even, as Python's round), and the pixel right and below."""
    xs, ys = set(), set()
    for y in range(size[1]):
        x0 = round((inv[0][1] * y + inv[0][2]) * 1024) + 16
        y0 = round((inv[1][1] * y + inv[1][2]) * 1024) + 16
        for x in range(size[0]):
            ix = ((x0 + round(inv[0][0] * x * 1024)) >> 5) >> 5
            iy = ((y0 + round(inv[1][0] * x * 1024)) >> 5) >> 5
            xs.update((ix, ix + 1))
            ys.update((iy, iy + 1))
    return xs, ys


@pytest.mark.parametrize("seed", range(6))
def test_the_window_holds_every_canvas_pixel_the_warp_reads(seed: int) -> None:
    rng = random.Random(seed)
    canvas, size = (128, 128), (48, 40)
    centre = (rng.uniform(0, 128), rng.uniform(0, 128))  # sometimes near an edge: the window is cut
    inv = affine_inverse(rng.uniform(-45, 45), rng.uniform(0.5, 1.5), centre, size)
    x, y, w, h = warp_job.read_window(inv, size, canvas, perspective=False)
    xs, ys = read_pixels(inv, size)
    inside_x = {v for v in xs if 0 <= v < canvas[0]}
    inside_y = {v for v in ys if 0 <= v < canvas[1]}
    assert inside_x and inside_y
    assert x <= min(inside_x) and max(inside_x) < x + w
    assert y <= min(inside_y) and max(inside_y) < y + h
    assert w <= max(inside_x) - min(inside_x) + 1 + 2 * (warp_job.MARGIN + 1)  # and little more


def test_the_window_is_cut_to_the_canvas_and_may_be_empty() -> None:
    shifted = [[1.0, 0.0, -500.0], [0.0, 1.0, -500.0], [0.0, 0.0, 1.0]]  # reads far left of the canvas
    assert warp_job.read_window(shifted, (64, 64), (128, 128), perspective=False)[2:] == (0, 0)
    whole = [[4.0, 0.0, -100.0], [0.0, 4.0, -100.0], [0.0, 0.0, 1.0]]
    assert warp_job.read_window(whole, (64, 64), (128, 128), perspective=False) == (0, 0, 128, 128)


@pytest.mark.parametrize(
    "inverse",
    [
        [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [-0.05, 0.0, 1.0]],  # w <= 0 at the right-hand corners
        [[math.inf, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
    ],
)
def test_a_map_degenerate_over_the_output_reads_the_whole_canvas(inverse: list[list[float]]) -> None:
    assert warp_job.read_window(inverse, (64, 64), (100, 90), perspective=True) == (0, 0, 100, 90)


def test_a_projective_map_positive_over_the_output_gets_a_window() -> None:
    inv = [[1.0, 0.0, 10.0], [0.0, 1.0, 20.0], [0.001, 0.0, 1.0]]
    x, y, w, h = warp_job.read_window(inv, (64, 64), (200, 200), perspective=True)
    # x: 10 (left column) to 73 / 1.063 = 68.7 (top right); y: 20 / 1.063 = 18.8 (top right) to 83 (bottom
    # left); then MARGIN around, the reads' right and bottom neighbours included
    assert (x, y, w, h) == (8, 16, 63, 70)
