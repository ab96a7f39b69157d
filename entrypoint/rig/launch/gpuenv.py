"""The GPU environment: variables set before services or jobs start, each with its reason.

A value the user set always wins; `rig env` shows which ones they set. The result is a value
(a list of entries), so callers and tests apply it to whatever mapping they like.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

from rig import rankenv

MARKER = rankenv.ENV_DEFAULTS
# The caching allocator's settings: torch 2.9 (stack cu128) reads the first and warns on every start
# when only the second is set; torch 2.3 (cu121) reads only the second. Both carry one value, the
# user's if they set either.
ALLOC_CONF = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")


@dataclass(frozen=True)
class EnvEntry:
    name: str
    value: str
    reason: str
    user_set: bool


def _defaults(threads: int, alloc_conf: str) -> list[tuple[str, str, str]]:
    return [
        (
            "CUDA_DEVICE_ORDER",
            "PCI_BUS_ID",
            "CUDA numbers GPUs in PCI bus order as nvidia-smi and NVML do: device=0 is nvidia-smi's GPU 0",
        ),
        (
            "OMP_NUM_THREADS",
            str(threads),
            "one OpenMP thread per CPU this process (or rank) is bound to; torchrun would otherwise set 1",
        ),
        (
            "MKL_THREADING_LAYER",
            "GNU",
            "MKL uses GNU OpenMP like torch and OpenCV do; mixing Intel's and GNU's OpenMP hangs or aborts",
        ),
        (
            "PYTORCH_CUDA_ALLOC_CONF",
            alloc_conf,
            "the caching allocator grows segments instead of fragmenting on YOLO's varying batch shapes",
        ),
        (
            "PYTORCH_ALLOC_CONF",
            alloc_conf,
            "the same, under the name torch 2.9 (stack cu128) reads without a deprecation warning",
        ),
        (
            "NCCL_DEBUG",
            "WARN",
            "NCCL reports what went wrong (bad topology, timeouts) without per-call noise",
        ),
    ]


def default_threads() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def gpu_environment(environ: Mapping[str, str], *, threads: int | None = None) -> list[EnvEntry]:
    """The variables to set: the user's value where they set one, ours otherwise.

    threads: the CPUs of one rank (rig train passes its plan's share); default, all allowed CPUs.
    """
    n = threads if threads is not None else default_threads()
    ours = rankenv.rig_defaults(environ)
    users = [environ[name] for name in ALLOC_CONF if name in environ and name not in ours]
    alloc_conf = users[0] if users else "expandable_segments:True"
    entries = [
        EnvEntry(name, environ[name], reason, True)
        if name in environ and name not in ours
        else EnvEntry(name, value, reason, False)
        for name, value, reason in _defaults(n, alloc_conf)
    ]
    mine = ",".join(e.name for e in entries if not e.user_set)
    return [*entries, EnvEntry(MARKER, mine, "the variables above that rig chose (not you)", False)]


def apply(environ: MutableMapping[str, str], entries: list[EnvEntry]) -> None:
    for e in entries:
        if not e.user_set:
            environ[e.name] = e.value


def updated(environ: Mapping[str, str], *, threads: int | None = None) -> dict[str, str]:
    """A copy of environ with the GPU environment added."""
    env = dict(environ)
    apply(env, gpu_environment(environ, threads=threads))
    return env
