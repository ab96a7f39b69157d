"""Run by tests/image/test_hostile_inputs.py as yolo: what a user may leave at the node image cache's
path, planted in turn after a first build, the dataset built again each time as the trainer builds
it (Ultralytics' builder under rig's node cache). One `PROBE {json}` line per kind:
  kind, seconds (the build), mapped (the file now mapped is a regular file of this user's at the
  cache path), same (its first image equals the first build's).

  python hostile_cache_probe.py DATA_YAML
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("YOLO_VERBOSE", "False")

import numpy as np
from rig import log
from rig.yolo import ultra
from rig.yolo.nodecache import cached_dataset, imagecache
from ultralytics.cfg import get_cfg
from ultralytics.data.utils import check_det_dataset

KINDS = ("symlink", "other-dataset", "wrong-shape", "wrong-dtype", "folder", "world-writable")


def build(data: dict[str, Any], split: str) -> Any:
    cfg = get_cfg(overrides={"imgsz": 64, "batch": 4, "cache": "ram"})
    with cached_dataset.in_use(cfg):
        return ultra.build_yolo_dataset(cfg, data[split], 4, data, mode="train", stride=32)


def changed_first_record(raw: bytes, shape: bool) -> bytes:
    out = bytearray(raw)
    _, _, _, _, index_offset, _, _ = imagecache.HEADER.unpack_from(out)
    off, nbytes, h, w, c, dtype, h0, w0 = imagecache.RECORD.unpack_from(out, index_offset)
    if shape:
        h += 1  # one row more than its bytes hold
    else:
        dtype = b"|O8"  # the bytes as Python objects
    imagecache.RECORD.pack_into(out, index_offset, off, nbytes, h, w, c, dtype, h0, w0)
    return bytes(out)


def plant(kind: str, path: Path, good: bytes, other: bytes) -> None:
    if kind == "symlink":
        target = Path("/tmp/elsewhere.img")
        target.write_bytes(good)
        path.symlink_to(target)
    elif kind == "other-dataset":
        path.write_bytes(other)
    elif kind in ("wrong-shape", "wrong-dtype"):
        path.write_bytes(changed_first_record(good, kind == "wrong-shape"))
    elif kind == "folder":
        path.mkdir()
        (path / "inside").write_bytes(b"x")
    elif kind == "world-writable":
        path.write_bytes(good)
        path.chmod(0o666)


def report(**values: Any) -> None:
    os.write(1, ("PROBE " + json.dumps(values) + "\n").encode())


def main() -> None:
    log.setup()
    data = check_det_dataset(sys.argv[1])
    first = build(data, "train")
    path = Path(first.ims.path)
    reference = np.array(first.ims[0])
    good = path.read_bytes()
    other = Path(build(data, "val").ims.path).read_bytes()
    for kind in KINDS:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
        plant(kind, path, good, other)
        t0 = time.monotonic()
        ds = build(data, "train")
        seconds = time.monotonic() - t0
        st = os.lstat(path)
        mapped = (
            Path(ds.ims.path) == path
            and stat.S_ISREG(st.st_mode)
            and st.st_uid == os.geteuid()
            and not st.st_mode & stat.S_IWOTH
        )
        same = bool(np.array_equal(np.array(ds.ims[0]), reference))
        report(kind=kind, seconds=round(seconds, 2), mapped=mapped, same=same)


if __name__ == "__main__":
    main()
