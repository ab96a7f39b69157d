"""Per-rank binder: `python -m rig.launch.binder --plan JSON [--gpus-per-rank one|ordered] -- CMD...`,
what torchrun starts for each rank.

It gives its LOCAL_RANK exactly the GPU the plan names, applies the rank's CPU affinity and
preferred memory node to itself, then execs CMD, so the trainer and every data loader worker it
forks inherit all three. torch 2.3 has no --numa-binding.

Which GPU a rank uses is never left to `set_device(LOCAL_RANK)` over every GPU of the container
(with --gpus 0,2 that would be GPU 1, on the far node): CUDA_VISIBLE_DEVICES is set per rank.
- `one` (rig train): the rank sees its GPU alone, as cuda:0; no context lands on another GPU.
- `ordered` (rig launch, for programs written for torchrun): the rank sees the plan's GPUs in
  local-rank order, so the usual `cuda:LOCAL_RANK` is its GPU, and GPUs outside the plan are hidden.
rig.rankenv's CUDA device tells the program which torch device index is its GPU in either case.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import os
import platform
import signal
import sys
from collections.abc import Mapping, MutableMapping, Sequence

from rig import flags, log, program, rankenv
from rig.errors import RigError
from rig.launch import binding

_logger = log.get("binder")

MPOL_PREFERRED = 1
# set_mempolicy(2) has no glibc wrapper; syscall numbers per architecture.
_SYS_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237, "ppc64le": 261}


def binding_enabled(environ: Mapping[str, str]) -> bool:
    return flags.switched_on(environ, "NUMA_BINDING")


def set_preferred_node(node: int) -> int:
    """MPOL_PREFERRED on node for this process (inherited by fork and exec). 0 or an errno."""
    number = _SYS_SET_MEMPOLICY.get(platform.machine())
    if number is None:
        return errno.ENOSYS
    bits = ctypes.sizeof(ctypes.c_ulong) * 8
    mask = (ctypes.c_ulong * (node // bits + 1))()
    mask[node // bits] = 1 << (node % bits)
    libc = ctypes.CDLL(None, use_errno=True)
    # maxnode counts bits; the kernel reads one less than it is given.
    rc = libc.syscall(number, MPOL_PREFERRED, mask, ctypes.c_ulong(len(mask) * bits + 1))
    return 0 if rc == 0 else ctypes.get_errno()


PR_SET_PDEATHSIG = 1


def die_with_parent() -> int:
    """SIGKILL this process (and, across exec, the rank) when its parent, torchrun, dies: the rank
    leads a session of its own, so nothing else would end it if torchrun were killed. 0 or an errno."""
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    return 0 if rc == 0 else ctypes.get_errno()


GPUS_PER_RANK = rankenv.GPUS_PER_RANK


def gpu_environment(
    plan: Sequence[binding.RankBinding], local_rank: int, parent: str | None, mode: str
) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES and rig's CUDA device for one rank (rig.rankenv); {} for CPU ranks.
    parent: the container's own CUDA_VISIBLE_DEVICES (indices or UUIDs), which plan ordinals index into."""
    return rankenv.gpu_variables([r.gpu_index for r in plan], local_rank, parent, mode)


def rank_environment(rank: binding.RankBinding, environ: Mapping[str, str]) -> dict[str, str]:
    """What the rank's environment gains: the plan, for the trainer, telemetry and `rig doctor`."""
    return rankenv.binding_variables(rank.cpus, rank.mem_node, rank.gpu_bus_id, environ)


def bind(rank: binding.RankBinding, environ: MutableMapping[str, str]) -> None:
    """Apply rank's CPU and memory binding to this process; environ gets the rank's variables."""
    if not binding_enabled(environ):
        _logger.info("NUMA_BINDING=off: rank %d runs unbound", rank.local_rank)
        return
    os.sched_setaffinity(0, rank.cpus)
    environ.update(rank_environment(rank, environ))
    if rank.mem_node is None:
        return
    err = set_preferred_node(rank.mem_node)
    if err and rank.local_rank == 0:  # one warning per node, not one per rank
        _logger.warning(
            "memory binding refused (%s): ranks keep their CPU binding but allocate on any node; "
            "allow it with `cap_add: [SYS_NICE]` in compose (docker run --cap-add SYS_NICE), "
            "or set NUMA_BINDING=off to silence this",
            os.strerror(err),
        )


@program.entry("binder")
def main(argv: Sequence[str] | None = None) -> int:
    log.setup()
    parser = argparse.ArgumentParser(prog="python -m rig.launch.binder")
    parser.add_argument("--plan", required=True, help="the plan as `rig plan --json` prints it")
    parser.add_argument(
        "--gpus-per-rank",
        choices=GPUS_PER_RANK,
        default="ordered",
        help="one: each rank sees its GPU alone; ordered: the plan's GPUs, cuda:LOCAL_RANK is the rank's",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run after --")
    plan = binding.from_json(args.plan)
    local_rank = rankenv.local_rank(os.environ)
    if local_rank >= len(plan):
        raise RigError(f"LOCAL_RANK {local_rank} has no entry in a plan of {len(plan)} ranks", 2)
    os.environ.update(
        gpu_environment(plan, local_rank, os.environ.get("CUDA_VISIBLE_DEVICES"), args.gpus_per_rank)
    )
    bind(plan[local_rank], os.environ)
    parent = os.getppid()
    if die_with_parent() == 0 and os.getppid() != parent:
        return 1  # torchrun died before the rank could follow it
    sys.stdout.flush()
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main())
