"""rig.yolo.augment.device's parts that need no torch (the pixels are checked in the image:
tests/image/test_device_augment.py)."""

from __future__ import annotations

from rig.yolo.augment import device


def test_a_batch_the_workers_finished_passes_through() -> None:
    batch = {"img": object(), "cls": object()}
    assert device.finish(dict(batch), "cuda:0") == batch


def test_images_are_counted_by_their_files_whatever_img_holds() -> None:
    assert device.images_in({"im_file": ["a.jpg", "b.jpg", "c.jpg"], "img": b"packed tiles"}) == 3
