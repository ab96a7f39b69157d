"""Probes of the node image cache, run inside the image by tests/image/test_imagecache.py.

  batches DATA        stock cache=ram and the node cache give the same first batches (same seed)
  rank DATA           under torchrun: build the train dataset as a rank does, print what it mapped
  slow-build DATA     build the node cache slowly (to be killed half-way)
  fallback DATA       build with the node cache unusable: Ultralytics' own cache, batches still come
Each prints one `PROBE {json}` line per process.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("YOLO_VERBOSE", "False")

import torch
from rig import log
from rig.yolo.nodecache import cached_dataset, imagecache
from ultralytics.cfg import get_cfg
from ultralytics.data import build_dataloader, build_yolo_dataset
from ultralytics.data.utils import check_det_dataset
from ultralytics.utils.torch_utils import init_seeds, torch_distributed_zero_first

IMGSZ, BATCH = 160, 4


def report(**values: Any) -> None:
    os.write(1, ("PROBE " + json.dumps(values) + "\n").encode())  # one write: ranks share stdout


def dataset(data: dict[str, Any], ours: bool) -> Any:
    cfg = get_cfg(overrides={"imgsz": IMGSZ, "batch": BATCH, "cache": "ram"})
    init_seeds(0)  # as the trainer seeds before it builds its datasets
    with cached_dataset.in_use(cfg) if ours else contextlib.nullcontext():
        return build_yolo_dataset(cfg, data["train"], BATCH, data, mode="train", stride=32)


def first_batches(ds: Any, workers: int, n: int = 3) -> list[dict[str, Any]]:
    init_seeds(0)
    loader = build_dataloader(ds, BATCH, workers, shuffle=True, rank=-1, device="cpu")
    it = iter(loader)
    out = [next(it) for _ in range(n)]
    loader.close()
    return out


def batches(data: dict[str, Any]) -> None:
    for workers in (0, 2):
        stock, ours = (
            first_batches(dataset(data, False), workers),
            first_batches(dataset(data, True), workers),
        )
        pairs = list(zip(stock, ours, strict=True))
        same = all(torch.equal(a[k], b[k]) for a, b in pairs for k in ("img", "cls", "bboxes", "batch_idx"))
        same_files = all(a["im_file"] == b["im_file"] for a, b in pairs)
        report(workers=workers, same=same and same_files, shape=list(ours[0]["img"].shape))
    ds = dataset(data, True)
    report(cls=type(ds).__name__, ims=type(ds.ims).__name__, cache=ds.cache)


def rank(data: dict[str, Any]) -> None:
    torch.distributed.init_process_group("gloo")
    r = torch.distributed.get_rank()
    with torch_distributed_zero_first(r):  # as Ultralytics' get_dataloader builds under DDP
        ds = dataset(data, True)
    ds.ims[0].sum()  # touch the mapping
    maps = Path("/proc/self/maps").read_text()
    path = str(ds.ims.path)
    report(rank=r, path=path, inode=os.stat(path).st_ino, mapped=path in maps, cls=type(ds).__name__)
    torch.distributed.destroy_process_group()


def slow_build(data: dict[str, Any]) -> None:
    ds = dataset(data, False)  # stock's decode for reference; then a node cache built slowly

    def decode(i: int) -> imagecache.Decoded:
        time.sleep(0.5)
        im = ds.ims[i]
        return imagecache.Decoded(im.copy(), im.shape, im.dtype.str, ds.im_hw0[i])

    key = imagecache.cache_key(imagecache.stamp(ds.im_files), cached_dataset.settings(ds))
    imagecache.obtain(
        imagecache.cache_dir(os.environ),
        key,
        ds.im_files,
        decode,
        estimate=1 << 20,
        threads=1,
        environ=os.environ,
    )


def fallback(data: dict[str, Any]) -> None:
    ds = dataset(data, True)
    report(
        cls=type(ds).__name__, ims=type(ds.ims).__name__, cache=ds.cache, batches=len(first_batches(ds, 0, 2))
    )


if __name__ == "__main__":
    log.setup()
    command, data_yaml = sys.argv[1], sys.argv[2]
    {"batches": batches, "rank": rank, "slow-build": slow_build, "fallback": fallback}[command](
        check_det_dataset(data_yaml)
    )
