# mypy: disable-error-code="safe-super"
# (NodeCached's base is contract.Dataset, a Protocol, for the type check only.)
"""Ultralytics' datasets with their `cache=ram` images in the node's image cache (nodecache.imagecache).

A subclass of the class Ultralytics picks (YOLODataset, YOLOMultiModalDataset) changes two steps
of its __init__, through BaseDataset's own methods:
- `check_cache_ram`: instead of sizing a copy for this process against free RAM, obtain the node's
  cache file (map it, or build it once for every rank); then draw from `random` exactly what
  Ultralytics' check draws (one index per sampled image), so every later draw (mosaic, the
  augmentations) is the one stock `cache=ram` makes: same seed, same batches.
- `cache_images`: the images are views into the mapped file.
Labels, transforms and mosaic's choice of images (`cache == "ram"`) stay Ultralytics' own. Where
the cache cannot be used (read-only or full location, no file locks, over budget): one WARNING, and
with several ranks on the node `cache=False`, as the launch would have decided without a node cache
(Ultralytics' own `cache=ram` would keep a copy per rank, each checking RAM as if alone: a host
OOM); one rank alone gets Ultralytics' own `cache=ram`, which checks the RAM for its one copy.
While the launcher prepares the data (rig.yolo.nodecache.prepare), an unusable cache is raised instead.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

from rig import log, rankenv
from rig.hardware import topology
from rig.yolo import contract, ultra, ultracheck
from rig.yolo.nodecache import imagecache

_logger = log.get("imagecache")
RESIZE_MODE = "rect_mode=True,resize_short=False"  # how BaseDataset.cache_images calls load_image
SAMPLED = 30  # images BaseDataset.check_cache_ram draws at random to size the cache
_warned = False
_raise_unavailable = False  # set while the launcher prepares (see preparing)


def _local_rank_zero() -> bool:
    return os.environ.get("LOCAL_RANK", "0") in {"0", "-1"}


def settings(ds: contract.Dataset) -> dict[str, Any]:
    """What besides the files changes the decoded pixels: part of the key."""
    return settings_for(ds.imgsz, ds.channels, ds.cv2_flag)


def settings_for(imgsz: Any, channels: int, cv2_flag: int | None = None) -> dict[str, Any]:
    cv2: Any = importlib.import_module("cv2")
    if cv2_flag is None:  # as BaseDataset picks it
        cv2_flag = {1: cv2.IMREAD_GRAYSCALE, 3: cv2.IMREAD_COLOR}.get(channels, cv2.IMREAD_UNCHANGED)
    return {
        "imgsz": imgsz if isinstance(imgsz, int) else list(imgsz),
        "channels": channels,
        "cv2_flag": cv2_flag,
        "resize": RESIZE_MODE,
        "ultralytics": ultra.package().__version__,  # ImportError without it, as cv2
        "opencv": cv2.__version__,
    }


def cache_file(images: list[str], imgsz: int, channels: int = 3) -> Path:
    """Where the node cache of these images (a dataset's im_files) is, or will be."""
    key = imagecache.cache_key(imagecache.stamp(images), settings_for(imgsz, channels))
    return imagecache.cache_dir(os.environ) / f"{key}{imagecache.SUFFIX}"


def estimate(ds: contract.Dataset) -> int:
    """The file's size from the labels' image sizes (read by Ultralytics' label scan); where they are
    gone (rect batches pop them), the square upper bound."""
    size = max(ds.imgsz) if isinstance(ds.imgsz, (tuple, list)) else int(ds.imgsz)
    total: int = imagecache.DATA_OFFSET + 256 * int(ds.ni)
    for label in ds.labels:
        shape = label.get("shape")
        if shape is None:
            total += size * size * ds.channels
        else:
            h, w = imagecache.resized_shape(int(shape[0]), int(shape[1]), size)
            total += h * w * ds.channels
    return total


def ranks_on_node() -> int:
    """The ranks of this node (torchrun's LOCAL_WORLD_SIZE); 1 outside torchrun."""
    return rankenv.local_world_size(os.environ)


def _warn_once(why: str, ranks: int) -> None:
    global _warned
    if not _warned and _local_rank_zero():
        if ranks > 1:
            _logger.warning("%s", unusable_warning(why, ranks))
        else:
            _logger.warning("the node image cache is not used (%s): Ultralytics' own cache=ram", why)
    _warned = True


def unusable_warning(why: str, ranks: int) -> str:
    return (
        f"the node image cache cannot be used ({why}): cache=False, as the launch decides without it; "
        f"the {ranks} ranks of this node would each keep a copy of the images "
        f"({imagecache.CACHE_DIR_ENV} on a local disk with room and file locks keeps one per node)"
    )


def _without_node_cache(ds: contract.Dataset, why: str, own: Any) -> bool:
    """check_cache_ram's answer where the node cache cannot be used (see the module's docstring)."""
    ranks = ranks_on_node()
    _warn_once(why, ranks)
    if ranks <= 1:
        return bool(own())
    ds.cache = None  # what Ultralytics' own check sets when it will not cache
    return False


@contextlib.contextmanager
def preparing() -> Iterator[None]:
    """While the launcher builds the caches: an unusable node cache raises imagecache.Unavailable."""
    global _raise_unavailable
    _raise_unavailable = True
    try:
        yield
    finally:
        _raise_unavailable = False


if TYPE_CHECKING:
    _Dataset = contract.Dataset
else:
    _Dataset = object


class NodeCached(_Dataset):
    """A dataset (`node_cached` puts this in front of its class) whose cache=ram images are views
    into the node's cache file."""

    rig_images: imagecache.Images | None = None
    rig_base: ClassVar[Any]  # the Ultralytics class it extends: its own load_image decodes

    def check_cache_ram(self, safety_margin: float = 1.0) -> bool:
        try:
            self.rig_images = _obtain(self, self.rig_base)
        except imagecache.Unavailable as e:
            if _raise_unavailable:
                raise
            return _without_node_cache(
                self, str(e), lambda: super(NodeCached, self).check_cache_ram(safety_margin)
            )
        for _ in range(min(self.ni, SAMPLED)):
            random.randrange(self.ni)
        return True

    def cache_images(self) -> None:
        if self.cache != "ram" or self.rig_images is None:
            super().cache_images()
            return
        self.ims, self.im_hw0, self.im_hw = self.rig_images, self.rig_images.hw0, self.rig_images.hw


@functools.cache
def node_cached(base: type) -> type:
    """base with its cache=ram images in the node's cache file; base itself when it loads or caches
    images its own way (then the file would not hold what it loads). Importable by name from this
    module, so a dataset pickles to spawn-started loader workers."""
    ours = cast("type[contract.Dataset]", base)
    core = cast("type[contract.Dataset]", ultra.data_base().BaseDataset)
    if ours.load_image is not core.load_image or ours.cache_images is not core.cache_images:
        return base
    name = f"NodeCached{base.__name__}"
    return type(name, (NodeCached, base), {"__module__": __name__, "__qualname__": name, "rig_base": base})


def __getattr__(name: str) -> Any:
    """NodeCachedYOLODataset and its siblings, made on first use (unpickling in a spawned worker)."""
    if name.startswith("NodeCached"):
        base = getattr(ultra.data_dataset(), name.removeprefix("NodeCached"), None)
        if base is not None:
            return node_cached(base)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _obtain(ds: contract.Dataset, base: Any) -> imagecache.Images:
    np: Any = importlib.import_module("numpy")

    def decode(i: int) -> imagecache.Decoded:
        im, hw0, _ = base.load_image(ds, i)  # Ultralytics' decode and resize, nothing else
        im = np.ascontiguousarray(im)
        return imagecache.Decoded(im, tuple(im.shape), im.dtype.str, (int(hw0[0]), int(hw0[1])))

    key = imagecache.cache_key(imagecache.stamp(ds.im_files), settings(ds))
    got = imagecache.obtain(
        imagecache.cache_dir(os.environ),
        key,
        list(ds.im_files),
        decode,
        estimate=estimate(ds),
        threads=len(topology.container_cpus()),
        environ=os.environ,
    )
    if _local_rank_zero() or got.built:
        size = got.index.data_bytes / imagecache.GIB
        how = "decoded into" if got.built else "mapped"
        _logger.info(
            "%d images (%.2f GiB) %s %s in %.1f s: one copy for every rank of this node",
            len(got.index.records),
            size,
            how,
            got.path,
            got.seconds,
        )
    return imagecache.Images(got.path, got.index, ds.im_files, got.held)


def wanted(cfg: contract.Cfg) -> bool:
    """cfg asks for cache=ram (True or 'ram'), RIG_IMAGE_CACHE is not off and the installed
    Ultralytics has what the node cache needs (said at start)."""
    value = cfg.cache
    ram = value is True or (isinstance(value, str) and value.lower() in {"ram", "true"})
    return ram and imagecache.enabled(os.environ) and ultracheck.feature_on(contract.NODE_CACHE)


@contextlib.contextmanager
def in_use(cfg: contract.Cfg) -> Iterator[None]:
    """While Ultralytics builds datasets (its build_yolo_dataset), the classes it instantiates are the
    node-cached ones, when cfg asks for cache=ram."""
    if not wanted(cfg):
        yield
        return
    with ultra.datasets_built_as(node_cached):
        yield
