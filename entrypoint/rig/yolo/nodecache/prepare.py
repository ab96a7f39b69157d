"""The data prepared once per node by the launcher, before any rank starts: the label scan and the
node image cache.

Under DDP, Ultralytics builds the datasets inside `torch_distributed_zero_first`: local rank 0 scans
the labels (and, with rig's node cache, decodes the images) while the other ranks wait in a barrier,
a collective bound by the process group's timeout (RIG_NCCL_TIMEOUT). A dataset whose preparation
takes longer kills the job, and the killed build is lost, so every rerun repeats it. Here `rig
train` builds both datasets the way the trainer will (Ultralytics' `build_yolo_dataset`, the
arguments the ranks get) before it execs torchrun, with every CPU of the node and no process group
to time out; the ranks then find the label cache and map the image cache in seconds.

The build's page-cache pages land where the launcher's memory policy puts them: the launcher is
bound to no NUMA node (the binder binds each rank later), so with `NUMA_BINDING` they are not all on
rank 0's node as they were when rank 0 built the cache; the kernel places each page on the node of
the CPU that wrote it.
"""

from __future__ import annotations

from collections.abc import Mapping

from rig import log
from rig.yolo import ultra
from rig.yolo.nodecache import cached_dataset, imagecache

_logger = log.get("prepare")
_STRIDE = 32  # YOLO detection models' largest stride; the trainer's imgsz is a multiple of it
_TEXT = frozenset(
    {"name", "project", "data", "model", "device", "tracker", "cfg"}
)  # as the trainer reads them


def wanted(args: Mapping[str, str], task: str, world: int) -> bool:
    """Whether the launcher prepares: several ranks (one needs no barrier), a new run (a resume takes
    its arguments from the checkpoint), a dataset Ultralytics builds with build_yolo_dataset."""
    resuming = args.get("resume", "").strip().lower() not in {"", "false", "none"}
    return world > 1 and not resuming and bool(args.get("data")) and task != "classify"


def before_ranks(args: Mapping[str, str], *, nranks: int, world: int) -> dict[str, str]:
    """Scan the labels and build the node image cache (cache=ram) of the train and val sets. Returns
    the arguments for the ranks: cache=False when the node cache cannot be used by several ranks."""
    out = dict(args)
    if not ultra.importable():
        return out
    cfg = ultra.get_cfg({k: v if k in _TEXT else ultra.smart_value(v) for k, v in args.items()})
    cfg.imgsz = ultra.checks().check_imgsz(cfg.imgsz, stride=_STRIDE, floor=_STRIDE, max_dim=1)
    data = ultra.check_dataset(str(args["data"])) or {}
    batch = max(int(cfg.batch) // max(world, 1), 1) if cfg.batch and cfg.batch >= 1 else ultra.DEFAULT_BATCH
    for mode, split in (("train", data.get("train")), ("val", data.get("val") or data.get("test"))):
        if not split:
            continue
        try:
            with cached_dataset.in_use(cfg), cached_dataset.preparing():
                ds = ultra.build_yolo_dataset(
                    cfg, split, batch, data, mode=mode, rect=mode == "val", stride=_STRIDE
                )
            _logger.info("%s: %d images and their labels ready before the ranks start", mode, len(ds))
        except imagecache.Unavailable as e:
            if nranks > 1:
                _logger.warning("%s", cached_dataset.unusable_warning(str(e), nranks))
                out["cache"], cfg.cache = "False", False
            else:
                _logger.warning("the node image cache is not used (%s): Ultralytics' own cache=ram", e)
                break
    return out
