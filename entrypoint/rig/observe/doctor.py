"""`rig doctor`: find what is wrong with this training box, one check at a time, each with its fix.

Gathering (rig.observe.doctor_gather) reads the world once into `Facts`; every check here is a pure function
of those facts, so tests run them on tables of made-up machines. A check passes, warns or fails;
`skip` marks a check that had nothing to look at (no GPU to bind, no --data, no --bench) and, like
a warning, does not change the exit code. Any failure exits 1.
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from rig import paths
from rig.hardware import fabric
from rig.hardware.fabric import Fabric
from rig.hardware.topology import Topology, format_cpulist
from rig.launch.binding import Plan
from rig.observe.bench import BenchResult
from rig.origins import Origin
from rig.userids import UID_ENV
from rig.versions import DEFAULT_STACK, STACKS, Stack, stack_named
from rig.yolo import settings, ultra

GIB = 1 << 30
MIB = 1 << 20
STACK_RECOMMENDED = 64 * MIB  # what NVIDIA's framework containers ask for (--ulimit stack=67108864)
CAP_SYS_NICE = 23  # bit in /proc/<pid>/status Cap* masks (linux/capability.h)
# Below this a single modern GPU outpaces the disk for YOLO at 640 px; it is a prompt to look,
# not a measured limit of any particular GPU.
SLOW_READ_IMG_S = 200.0

TOOLKIT_FIX = (
    "give the container GPUs: `docker run --gpus all ...`, or in compose `gpus: all` (or "
    "deploy.resources.reservations.devices with driver: nvidia); on the host install the NVIDIA "
    "Container Toolkit, run `sudo nvidia-ctk runtime configure --runtime=docker`, restart Docker, "
    "and check that `nvidia-smi` works there"
)


class Status(enum.StrEnum):
    """What a check found; printed and written to JSON as its value."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"  # nothing to look at: like a warning, no effect on the exit code


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class GpuFact:
    index: int
    name: str
    capability: tuple[int, int] | None = None  # CUDA compute capability, (9, 0) for sm_90; None: unread


@dataclass(frozen=True)
class DatasetFacts:
    data: str
    path: str | None = None  # the resolved yaml or directory; None when it was not found
    error: str | None = None  # why it cannot be read
    images: int = 0
    sampled: int = 0  # files read for the speed test
    sampled_bytes: int = 0
    read_s: float = 0.0
    unreadable: tuple[str, ...] = ()
    cache_value: str | None = None  # rig.yolo.tuning's cache decision: "ram" or "False"
    cache_reason: str = ""
    image_cache_path: str | None = None  # the node image cache's file for these images at --imgsz
    image_cache_bytes: int = 0  # 0: not built
    image_cache_resident: int = 0  # of those, in the page cache
    image_cache_error: str | None = None  # why it could not be looked up


@dataclass(frozen=True)
class Facts:
    driver_version: str | None = None
    nvml_error: str | None = None  # why NVML could not be used; None when it could
    gpus: tuple[GpuFact, ...] = ()  # what NVML sees: the container's GPUs
    requested_gpus: int | None = None
    requested_from: str = ""
    topology: Topology | None = None  # after CUDA_VISIBLE_DEVICES
    topology_error: str | None = None
    plan: Plan | None = None
    shm_total: int = 0
    shm_free: int = 0
    batch: int = ultra.DEFAULT_BATCH
    imgsz: int = ultra.DEFAULT_IMGSZ
    shm_batches_per_worker: int = 8
    memlock: tuple[int, int] = (-1, -1)  # soft, hard; -1 is unlimited (RLIM_INFINITY)
    stack: tuple[int, int] = (-1, -1)
    seccomp: int | None = None  # /proc/self/status Seccomp: 0 none, 1 strict, 2 filter
    cap_bnd: int | None = None
    numa_nodes: int = 1
    dataset: DatasetFacts | None = None
    bench: BenchResult | None = None
    bench_error: str | None = None
    bench_requested: bool = False
    # What user yolo added with `pip install` (rig.workstation.userenv): (name, version, the image's
    # pin it shadows or None), and where. The pin is a version, or "name version" for a package that
    # installs a pinned module under another name (plain `ultralytics`).
    user_packages: tuple[tuple[str, str, str | None], ...] = ()
    user_site: str = ""
    cuda_stack: str = DEFAULT_STACK  # the image's stack (RIG_STACK)
    arch_flags: tuple[str, ...] | None = None  # torch's GPU code in this image; None: unread
    # The Ultralytics this user's sessions, notebooks and `rig train` import (rig.origins), and the
    # image's; None: none found. What turned off for the session's (the contract check), one line each.
    ultralytics: Origin | None = None
    image_ultralytics: Origin | None = None
    ultralytics_off: tuple[str, ...] = ()
    settings_file: str = ""  # Ultralytics' settings.json for this user
    settings_problem: str | None = None  # why `yolo settings` would not stick; None: it will
    fabric: Fabric | None = None  # what NCCL would travel over between nodes; None: unread
    nnodes: int = 1  # the nodes the scheduler's (or our own) variables say this run spans


# ------------------------------------------------------------------------------------------- checks
def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text))


def _size(n: float) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / MIB:.0f} MiB"


def _limit(n: int) -> str:
    return "unlimited" if n < 0 else _size(n)


def _stack(f: Facts) -> Stack:
    return stack_named(f.cuda_stack) or STACKS[0]


def check_driver(f: Facts) -> Check:
    s = _stack(f)
    if f.driver_version is None:
        why = f"({f.nvml_error})" if f.nvml_error else ""
        return Check(
            "driver",
            Status.FAIL,
            f"no NVIDIA driver visible in the container {why}".strip(),
            f"install an NVIDIA driver >= {s.min_driver} on the host, then give the container GPUs "
            "(the gpus check says how)",
        )
    if _version(f.driver_version) < _version(s.min_driver):
        return Check(
            "driver",
            Status.FAIL,
            f"driver {f.driver_version} is older than {s.min_driver}, the minimum for the image's "
            f"CUDA {s.cuda} (stack {s.name})",
            f"upgrade the host's NVIDIA driver to {s.min_driver} or newer",
        )
    return Check(
        "driver",
        Status.PASS,
        f"driver {f.driver_version} (stack {s.name}: CUDA {s.cuda} needs >= {s.min_driver})",
    )


def _arch(flag: str) -> tuple[str, int, int, bool] | None:
    """'sm_86' -> ('sm', 8, 6, False); 'compute_90' is PTX; 'sm_90a' is for 9.0 alone."""
    m = re.fullmatch(r"(sm|compute)_(\d+)(\d)([af]?)", flag)
    return (m.group(1), int(m.group(2)), int(m.group(3)), m.group(4) == "a") if m else None


def has_kernels(capability: tuple[int, int], archs: Sequence[str]) -> bool:
    """Whether torch built for `archs` runs on a GPU of this compute capability. CUDA's rule: a
    binary for sm_XY runs on X.Z for every Z >= Y (same major: sm_86 runs on an sm_89 GPU, sm_90
    on no Blackwell), PTX (compute_XY) is compiled by the driver for any GPU from X.Y on."""
    for flag in archs:
        arch = _arch(flag)
        if arch is None:
            continue
        kind, major, minor, specific = arch
        if specific:
            ok = capability == (major, minor)
        elif kind == "sm":
            ok = capability[0] == major and capability[1] >= minor
        else:
            ok = capability >= (major, minor)
        if ok:
            return True
    return False


def stack_for(capability: tuple[int, int]) -> Stack | None:
    """The first stack (the default first) whose torch runs on this GPU."""
    return next((s for s in STACKS if has_kernels(capability, s.archs)), None)


def _sm(capability: tuple[int, int]) -> str:
    return f"sm_{capability[0]}{capability[1]}"


def check_kernels(f: Facts) -> Check:
    s = _stack(f)
    archs = f.arch_flags if f.arch_flags is not None else s.archs
    known = [(g, g.capability) for g in f.gpus if g.capability is not None]
    if not known:
        return Check("kernels", Status.SKIP, "no GPU compute capability to check")
    have = f"stack {s.name}'s torch has kernels for {' '.join(archs)}"
    missing = [(g, cap) for g, cap in known if not has_kernels(cap, archs)]
    if not missing:
        return Check(
            "kernels", Status.PASS, f"{have}: runs on {', '.join(sorted({_sm(c) for _, c in known}))}"
        )
    g, cap = missing[0]
    gpu = f"GPU {g.index} ({g.name}, {_sm(cap)})"
    other = stack_for(cap)
    if other is None:
        return Check(
            "kernels",
            Status.FAIL,
            f"{gpu}: no yolo-rig stack has kernels for it ({have})",
            "train on a GPU a stack supports: " + "; ".join(f"{o.name}: {' '.join(o.archs)}" for o in STACKS),
        )
    return Check(
        "kernels",
        Status.FAIL,
        f"{gpu}: {have}, none for this GPU: use stack {other.name} (yolo-rig:{other.name})",
        f"`make build STACK={other.name}`, then run that image (`STACK={other.name} make up`, "
        f"`make train STACK={other.name}`); it needs driver >= {other.min_driver}",
    )


def check_gpus(f: Facts) -> Check:
    if not f.gpus:
        why = f.nvml_error or "NVML sees 0 GPUs"
        return Check("gpus", Status.FAIL, f"no GPU visible in the container ({why})", TOOLKIT_FIX)
    usable = len(f.topology.gpus) if f.topology is not None else len(f.gpus)
    names = ", ".join(sorted({g.name for g in f.gpus}))
    seen = f"{len(f.gpus)} GPU(s) visible ({names})"
    if usable != len(f.gpus):
        seen += f", {usable} of them after CUDA_VISIBLE_DEVICES"
    if f.requested_gpus is not None and usable < f.requested_gpus:
        return Check(
            "gpus",
            Status.FAIL,
            f"{f.requested_from} asks for {f.requested_gpus} GPU(s) but {seen}",
            "start the container with the GPUs you want (`--gpus '\"device=0,1\"'`, compose device_ids "
            "or count) and check them with `nvidia-smi -L` on the host; unset a CUDA_VISIBLE_DEVICES "
            "that hides some",
        )
    if f.requested_gpus is not None and usable > f.requested_gpus:
        return Check("gpus", Status.PASS, f"{seen}; {f.requested_from} uses {f.requested_gpus} of them")
    return Check("gpus", Status.PASS, seen)


def shm_need(f: Facts, workers_per_rank: int, nranks: int) -> int:
    """Bytes of /dev/shm the loaders hold: every worker keeps batches in flight there (rig.yolo.tuning)."""
    rank_batch = max(f.batch // max(nranks, 1), 1)
    batch_bytes = rank_batch * 3 * f.imgsz * f.imgsz
    return f.shm_batches_per_worker * batch_bytes * max(workers_per_rank, 0) * max(nranks, 1)


def _ranks_and_cpus(f: Facts) -> tuple[int, int]:
    if f.plan is not None and f.plan.ranks:
        return len(f.plan.ranks), min(len(r.cpus) for r in f.plan.ranks)
    cpus = len(f.topology.allowed_cpus) if f.topology is not None else 1
    return 1, max(cpus, 1)


def check_shm(f: Facts) -> Check:
    nranks, rank_cpus = _ranks_and_cpus(f)
    full = shm_need(f, rank_cpus, nranks)
    one = shm_need(f, 1, nranks)
    what = (
        f"{rank_cpus} loader worker(s) per rank x {nranks} rank(s) at batch {f.batch}, imgsz {f.imgsz}"
        f" need {_size(full)}"
    )
    fix = (
        f"give the container a bigger /dev/shm: compose `ipc: host` or `shm_size: {math.ceil(full / GIB)}g` "
        f"(docker run --ipc=host or --shm-size={math.ceil(full / GIB)}g)"
    )
    have = f"/dev/shm is {_size(f.shm_total)} ({_size(f.shm_free)} free)"
    if f.shm_free >= full:
        return Check("shm", Status.PASS, f"{have}; {what}")
    if f.shm_free < one:
        return Check("shm", Status.WARN, f"{have}: not enough for one loader worker; {what}", fix)
    return Check("shm", Status.WARN, f"{have}: rig train will run fewer loader workers; {what}", fix)


def check_memlock(f: Facts) -> Check:
    soft = f.memlock[0]
    if soft < 0:
        return Check("memlock", Status.PASS, "locked-memory limit is unlimited")
    return Check(
        "memlock",
        Status.WARN,
        f"locked-memory limit is {_limit(soft)}: NCCL over InfiniBand/RoCE cannot register its buffers",
        "compose `ulimits: {memlock: -1}` (docker run --ulimit memlock=-1)",
    )


def check_fabric(f: Facts) -> Check:
    """Which transport a multi-node run gets: InfiniBand/RoCE, or TCP sockets (a WARNING where this
    run spans several nodes, or where the host has RDMA devices the container was not given)."""
    if f.fabric is None:
        return Check("fabric", Status.SKIP, "not read")
    carried = fabric.transport(f.fabric)
    detail = carried.line().removeprefix("fabric: ")
    if carried.rdma:
        return Check("fabric", Status.PASS, detail)
    missing = bool(f.fabric.rdma_devices) and not f.fabric.uverbs
    if f.nnodes > 1 or missing:
        fix = (
            fabric.MISSING_DEVICES_FIX
            if f.fabric.rdma_devices
            else "run multi-node jobs on nodes with InfiniBand/RoCE passed into the container; over sockets, "
            "set NCCL_SOCKET_IFNAME to the fastest interface"
        )
        return Check("fabric", Status.WARN, f"{f.nnodes} node(s): {detail}", fix)
    return Check("fabric", Status.PASS, f"one node (NVLink/PCIe within it); several would use {detail}")


def check_stack(f: Facts) -> Check:
    soft = f.stack[0]
    if soft < 0 or soft >= STACK_RECOMMENDED:
        return Check("stack", Status.PASS, f"stack limit is {_limit(soft)}")
    return Check(
        "stack",
        Status.WARN,
        f"stack limit is {_limit(soft)}, below the {_size(STACK_RECOMMENDED)} NVIDIA's containers ask for",
        "compose `ulimits: {stack: 67108864}` (docker run --ulimit stack=67108864)",
    )


def check_numa(f: Facts) -> Check:
    if f.topology is None:
        return Check(
            "numa",
            Status.WARN,
            f"could not read the topology ({f.topology_error})",
            "run `rig plan` to see why",
        )
    if not f.topology.gpus or f.plan is None:
        return Check("numa", Status.SKIP, "no GPU to bind")
    cpus = format_cpulist(f.topology.allowed_cpus)
    ranks = "; ".join(
        f"rank {r.local_rank}: GPU {r.gpu_bus_id} node {r.numa_node} CPUs {format_cpulist(r.cpus)}"
        for r in f.plan.ranks
    )
    if f.plan.warnings:
        return Check("numa", Status.WARN, f"container CPUs {cpus}; {' '.join(f.plan.warnings)}", _numa_fix(f))
    thin = [r for r in f.plan.ranks if len(r.cpus) < 2]
    if thin:
        return Check(
            "numa",
            Status.WARN,
            f"container CPUs {cpus}; {len(thin)} rank(s) get one CPU, too few for loader workers: {ranks}",
            _numa_fix(f),
        )
    return Check("numa", Status.PASS, f"container CPUs {cpus}; {ranks}")


def _numa_fix(f: Facts) -> str:
    assert f.topology is not None
    nodes = sorted({g.numa_node for g in f.topology.gpus if g.numa_node >= 0})
    local = frozenset().union(*(f.topology.node_cpus.get(n, frozenset()) for n in nodes)) if nodes else None
    want = f" (the GPUs' nodes have CPUs {format_cpulist(local)})" if local else ""
    return f"give the container CPUs on each GPU's NUMA node{want}: docker --cpuset-cpus or compose `cpuset`"


def check_sys_nice(f: Facts) -> Check:
    if f.seccomp == 0:
        return Check(
            "cap_sys_nice", Status.PASS, "no seccomp filter: ranks can bind memory to their NUMA node"
        )
    # Docker's seccomp profile allows set_mempolicy/mbind only to containers holding CAP_SYS_NICE; a
    # non-root user's effective set is empty, so the container's bounding set is what decides.
    if f.cap_bnd is not None and f.cap_bnd >> CAP_SYS_NICE & 1:
        return Check(
            "cap_sys_nice", Status.PASS, "CAP_SYS_NICE granted: ranks can bind memory to their NUMA node"
        )
    if f.numa_nodes <= 1:
        return Check(
            "cap_sys_nice", Status.PASS, "one NUMA node: no memory binding needed (CAP_SYS_NICE not granted)"
        )
    return Check(
        "cap_sys_nice",
        Status.WARN,
        f"no CAP_SYS_NICE on a {f.numa_nodes}-node machine: Docker's seccomp profile blocks memory binding, "
        "so ranks allocate on whatever node the kernel picks",
        "compose `cap_add: [SYS_NICE]` (docker run --cap-add SYS_NICE)",
    )


def check_dataset(f: Facts) -> Check:
    d = f.dataset
    if d is None:
        return Check("dataset", Status.SKIP, "no --data given")
    if d.path is None or d.error:
        return Check(
            "dataset",
            Status.FAIL,
            f"{d.data}: {d.error or 'not found'}",
            "give --data a data yaml or image directory that exists in the container (mount it, e.g. under "
            f"{paths.DATASETS}) and is readable by this user",
        )
    if d.images == 0:
        return Check(
            "dataset",
            Status.FAIL,
            f"{d.path}: no images in the train split",
            "check the yaml's path/train keys",
        )
    if d.unreadable:
        return Check(
            "dataset",
            Status.FAIL,
            f"{d.path}: {len(d.unreadable)} of {d.sampled} sampled files unreadable, e.g. {d.unreadable[0]}",
            f"fix the files' permissions for this user (rig runs as uid {UID_ENV}; see `id`)",
        )
    return Check("dataset", Status.PASS, f"{d.path}: {d.images} train images, readable")


def check_read_speed(f: Facts) -> Check:
    d = f.dataset
    if d is None or d.path is None or d.error or d.sampled == 0 or d.read_s <= 0:
        return Check("read_speed", Status.SKIP, "no readable dataset (--data)")
    img_s, mb_s = d.sampled / d.read_s, d.sampled_bytes / MIB / d.read_s
    detail = (
        f"read {d.sampled} files ({_size(d.sampled_bytes)}) in {d.read_s:.2f} s: {img_s:.0f} img/s, "
        f"{mb_s:.0f} MiB/s (files already in the page cache read faster)"
    )
    if img_s < SLOW_READ_IMG_S:
        return Check(
            "read_speed",
            Status.WARN,
            detail,
            "copy the dataset to a local SSD, or train with cache=ram (or cache=disk) so epochs after the "
            "first do not read it again",
        )
    return Check("read_speed", Status.PASS, detail)


def check_cache_ram(f: Facts) -> Check:
    d = f.dataset
    if d is None or d.cache_value is None:
        return Check("cache_ram", Status.SKIP, "no readable dataset (--data)")
    if d.cache_value == "ram":
        return Check("cache_ram", Status.PASS, f"cache=ram fits: {d.cache_reason}")
    return Check(
        "cache_ram",
        Status.WARN,
        f"cache=ram does not fit: {d.cache_reason}",
        "use cache=disk (decoded .npy next to the images), a smaller imgsz, fewer ranks per box, or more RAM",
    )


def check_image_cache(f: Facts) -> Check:
    d = f.dataset
    if d is None or d.image_cache_path is None:
        why = d.image_cache_error if d is not None and d.image_cache_error else "no readable dataset (--data)"
        return Check("image_cache", Status.SKIP, why)
    if not d.image_cache_bytes:
        return Check(
            "image_cache",
            Status.PASS,
            f"not built yet at imgsz {f.imgsz}: the first cache=ram run decodes once into "
            f"{d.image_cache_path}, then every rank and later run maps it",
        )
    share = d.image_cache_resident / d.image_cache_bytes
    state = "warm" if share >= 0.9 else "partly warm" if share > 0 else "cold"
    return Check(
        "image_cache",
        Status.PASS,
        f"{_size(d.image_cache_bytes)} at {d.image_cache_path}, {state}: {share:.0%} in the page cache "
        "(a cold file is read from disk once, not decoded again)",
    )


def check_settings(f: Facts) -> Check:
    if f.settings_problem is None:
        return Check("settings", Status.PASS, f"Ultralytics settings {f.settings_file} are writable")
    return Check("settings", Status.WARN, f.settings_problem, settings.FIX)


def check_bench(f: Facts) -> Check:
    if not f.bench_requested:
        return Check("bench", Status.SKIP, "loader vs step throughput not measured; run `rig doctor --bench`")
    if f.bench is None:
        return Check(
            "bench", Status.FAIL, f"rig bench failed: {f.bench_error}", "run `rig bench --quick` to see why"
        )
    ours, step, bottleneck = f.bench.loader.ours_img_s, f.bench.step_img_s, f.bench.bottleneck
    why = f.bench.bottleneck_reason
    detail = f"loader {ours:.3g} img/s, train step {step:.3g} img/s: the bottleneck is {bottleneck}"
    if why and "img/s" not in why:  # the bench's own reason, when it is more than these two numbers
        detail += f" ({why})"
    if bottleneck == "loader":
        return Check(
            "bench",
            Status.WARN,
            detail,
            "give each GPU more CPUs (cpuset on its NUMA node), train with cache=ram, or lighten "
            "augmentation; the GPU idles while it waits for data",
        )
    if bottleneck == "optimizer":  # the bench's reason names the optimizer and its share
        return Check(
            "bench",
            Status.WARN,
            f"{detail}: {why.rpartition('; ')[2] if '; ' in why else why}",
            "each optimizer step serves nbs images whatever the batch: train with a batch above nbs "
            "(YOLO26's recipe: batch=128) for fewer of them, or compare another optimizer= with "
            "`rig bench --optimizer NAME`",
        )
    if bottleneck == "host":
        return Check(
            "bench",
            Status.WARN,
            detail,
            "train with a bigger batch (more images per GPU per step: the launches and the optimizer "
            "cost the same per step) or a bigger model for the same GPU time; `rig bench --batch N` "
            "shows the gain before a run",
        )
    return Check("bench", Status.PASS, detail)


def check_user_packages(f: Facts) -> Check:
    if not f.user_packages:
        return Check(
            "user packages",
            Status.SKIP,
            f"none added (`pip install NAME` in a session puts them in {f.user_site})",
        )
    listed = ", ".join(f"{n} {v}" for n, v, _ in f.user_packages)
    detail = f"{len(f.user_packages)} added by you in {f.user_site}: {listed}"
    shadows = [(n, v, pin) for n, v, pin in f.user_packages if pin is not None and pin != v]
    if shadows:
        which = ", ".join(f"{n} {v} over the image's {pin}" for n, v, pin in shadows)
        return Check(
            "user packages",
            Status.WARN,
            f"{detail}; shadowing pinned packages: {which}",
            f"`pip uninstall {' '.join(n for n, _, _ in shadows)}` as yolo: the image's tested ones again",
        )
    return Check("user packages", Status.PASS, detail)


def check_ultralytics(f: Facts) -> Check:
    ours, image = f.ultralytics, f.image_ultralytics
    if ours is None:
        return Check(
            "ultralytics",
            Status.FAIL,
            "no Ultralytics to import: neither the image's nor one of yours",
            "`pip uninstall` as yolo what removed it (`pip list`), or start a fresh container of the image",
        )
    if image is not None and (ours.path, ours.version) == (image.path, image.version):
        return Check("ultralytics", Status.PASS, f"{ours.describe()}: the image's")
    detail = f"your sessions and `rig train` import {ours.describe()}, not the image's " + (
        image.describe() if image is not None else "(none found)"
    )
    if f.ultralytics_off:
        detail += "; turned off with it: " + "; ".join(f.ultralytics_off)
    undo = f"`pip uninstall {ours.dist}` as yolo" if ours.dist else f"take {ours.path} off PYTHONPATH"
    return Check(
        "ultralytics",
        Status.WARN,
        detail,
        f"{undo}: the image's tested one again (docs/ultralytics.md, another Ultralytics)",
    )


CHECKS: tuple[Callable[[Facts], Check], ...] = (
    check_driver,
    check_gpus,
    check_kernels,
    check_shm,
    check_memlock,
    check_fabric,
    check_stack,
    check_numa,
    check_sys_nice,
    check_ultralytics,
    check_settings,
    check_dataset,
    check_read_speed,
    check_cache_ram,
    check_image_cache,
    check_bench,
    check_user_packages,
)


def run_checks(facts: Facts) -> list[Check]:
    return [check(facts) for check in CHECKS]


def exit_code(checks: Sequence[Check]) -> int:
    return 1 if any(c.status is Status.FAIL for c in checks) else 0


# ---------------------------------------------------------------------------------------- rendering
def render_text(checks: Sequence[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        lines.append(f"{c.status:<4}  {c.name:<{width}}  {c.detail}")
        if c.fix and c.status in (Status.WARN, Status.FAIL):
            lines.append(f"{'':<4}  {'':<{width}}  fix: {c.fix}")
    counts = {s: sum(c.status is s for c in checks) for s in Status}
    lines.append("rig doctor: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    return "\n".join(lines)


def render_json(checks: Sequence[Check]) -> str:
    return json.dumps({"ok": exit_code(checks) == 0, "checks": [asdict(c) for c in checks]}, indent=2)
