"""The per-rank environment: every variable `rig train` and `rig launch` hand a rank, written and
read here only.

The launcher writes the run's variables (`launch_variables`), the binder each rank's own
(`gpu_variables`, `binding_variables`); the trainer, telemetry and metrics read them back through
the readers below, and torchrun's own (WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE) as numbers
(rig.envnumbers). Values in, values out: nothing here touches os.environ.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence

from rig import envnumbers
from rig.errors import RigError
from rig.hardware.topology import format_cpulist, normalize_bus_id, visible_entries

# Torch's index of the rank's GPU (the binder's choice): 0 under `rig train`, where the rank sees
# its GPU alone; LOCAL_RANK under `rig launch`.
CUDA_DEVICE = "RIG_CUDA_DEVICE"
CPUS = "RIG_CPUS"  # the rank's CPUs, as a cpulist
MEM_NODE = "RIG_MEM_NODE"  # its preferred memory node; empty: the kernel's default policy
GPU_BUS_ID = "RIG_GPU_BUS_ID"  # its GPU's bus id; empty for a CPU rank
# Every GPU of the run: its number in the container (what --gpus and device= name) = its bus id.
RUN_GPUS = "RIG_RUN_GPUS"
RUN_DIR = "RIG_RUN_DIR"  # the run's folder, decided once for every rank
# Names rig set itself (not the user), so a later `rig train` may resize OMP_NUM_THREADS per rank.
ENV_DEFAULTS = "RIG_ENV_DEFAULTS"

GPUS_PER_RANK = ("one", "ordered")

# torchrun's, for every rank it starts; unset outside torchrun (one process). Ultralytics' -1 for a
# rank outside DDP is taken too.
_TORCHRUN = "torchrun sets it for each rank; unset it outside torchrun"
WORLD_SIZE = envnumbers.Number("WORLD_SIZE", low=1, default=1, whole=True, hint=_TORCHRUN)
LOCAL_WORLD_SIZE = envnumbers.Number("LOCAL_WORLD_SIZE", low=1, default=1, whole=True, hint=_TORCHRUN)
RANK = envnumbers.Number("RANK", low=-1, default=0, whole=True, hint=_TORCHRUN)
LOCAL_RANK = envnumbers.Number("LOCAL_RANK", low=-1, default=0, whole=True, hint=_TORCHRUN)
_CUDA_DEVICE = envnumbers.Number(CUDA_DEVICE, low=0, whole=True, hint="the binder sets it for each rank")


def world_size(environ: Mapping[str, str]) -> int:
    """The ranks of every node (torchrun's WORLD_SIZE); 1 outside torchrun."""
    return WORLD_SIZE.read_int(environ)


def local_world_size(environ: Mapping[str, str]) -> int:
    """The ranks of this node (torchrun's LOCAL_WORLD_SIZE); 1 outside torchrun."""
    return LOCAL_WORLD_SIZE.read_int(environ)


def rank(environ: Mapping[str, str]) -> int:
    """This rank's global index (torchrun's RANK); 0 outside torchrun."""
    return RANK.read_int(environ)


def local_rank(environ: Mapping[str, str]) -> int:
    """This rank's index on its node (torchrun's LOCAL_RANK); 0 outside torchrun."""
    return LOCAL_RANK.read_int(environ)


def rig_defaults(environ: Mapping[str, str]) -> set[str]:
    """The names in environ that rig set (ENV_DEFAULTS), not the user."""
    return set(environ.get(ENV_DEFAULTS, "").split(","))


def gpu_variables(
    indices: Sequence[int | None], local_rank: int, parent: str | None, mode: str
) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES and CUDA_DEVICE for one rank of a plan whose ranks use the GPUs
    `indices` (their CUDA ordinals in the container); {} for CPU ranks. parent: the container's own
    CUDA_VISIBLE_DEVICES (indices or UUIDs), which the ordinals index into.
    mode `one`: the rank sees its GPU alone, as cuda:0; `ordered`: the plan's GPUs in local-rank
    order, so cuda:LOCAL_RANK is its GPU."""
    if not indices or any(i is None for i in indices):
        return {}
    known = visible_entries(parent) if parent else None

    def name(i: int | None) -> str:
        assert i is not None
        return known[i] if known and i < len(known) else str(i)

    if mode == "one":
        return {"CUDA_VISIBLE_DEVICES": name(indices[local_rank]), CUDA_DEVICE: "0"}
    return {"CUDA_VISIBLE_DEVICES": ",".join(name(i) for i in indices), CUDA_DEVICE: str(local_rank)}


def binding_variables(
    cpus: Iterable[int], mem_node: int | None, bus_id: str | None, environ: Mapping[str, str]
) -> dict[str, str]:
    """What a bound rank's environment gains: its binding, for the trainer, telemetry and `rig
    doctor`; OMP_NUM_THREADS sized to its CPUs unless the user set it."""
    cpu_set = sorted(set(cpus))
    updates = {
        CPUS: format_cpulist(cpu_set),
        MEM_NODE: "" if mem_node is None else str(mem_node),
        GPU_BUS_ID: bus_id or "",
    }
    if "OMP_NUM_THREADS" not in environ or "OMP_NUM_THREADS" in rig_defaults(environ):
        updates["OMP_NUM_THREADS"] = str(len(cpu_set))
    return updates


def cuda_device(environ: Mapping[str, str]) -> int | None:
    """The binder's choice of the rank's GPU, as torch numbers it; None outside the binder."""
    return _CUDA_DEVICE.read_int(environ) if environ.get(CUDA_DEVICE, "").strip() else None


def format_run_gpus(gpus: Iterable[tuple[int, str]]) -> str:
    """RUN_GPUS's value: '0=0000:18:00.0,2=0000:3b:00.0' (number in the container=bus id)."""
    return ",".join(f"{number}={bus}" for number, bus in gpus)


def parse_run_gpus(text: str) -> list[tuple[int, str]]:
    """The inverse of format_run_gpus; an entry that does not read is skipped."""
    out: list[tuple[int, str]] = []
    for item in text.split(","):
        number, _, bus = item.strip().partition("=")
        if number.isdigit() and bus:
            with contextlib.suppress(RigError):
                out.append((int(number), normalize_bus_id(bus)))
    return out


def run_gpus(environ: Mapping[str, str]) -> list[tuple[int, str]] | None:
    """The run's GPUs as `rig train`/`rig launch` named them; None when no launcher of rig's did."""
    text = environ.get(RUN_GPUS)
    return None if text is None else parse_run_gpus(text)


def run_dir(environ: Mapping[str, str]) -> str | None:
    return environ.get(RUN_DIR) or None


def launch_variables(gpus: Iterable[tuple[int, str]] | None, run_folder: str | None) -> dict[str, str]:
    """What the launcher hands every rank: the run's GPUs (None: a CPU run, no variable) and its folder."""
    out = {} if gpus is None else {RUN_GPUS: format_run_gpus(gpus)}
    return {**out, **({RUN_DIR: run_folder} if run_folder else {})}
