"""A rank of `rig launch`: joins gloo, sums the ranks, reports its CPUs, memory policy and rank
variables as one `PROBE {json}` line."""

import ctypes
import json
import os
import socket

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
# get_mempolicy(2): what the binder left this process (x86_64 syscall 239).
libc = ctypes.CDLL(None, use_errno=True)
mode, mask = ctypes.c_int(-1), (ctypes.c_ulong * 16)()
rc = libc.syscall(239, ctypes.byref(mode), mask, ctypes.c_ulong(16 * 64), None, ctypes.c_ulong(0))
keys = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "OMP_NUM_THREADS",
    "RIG_CPUS",
    "RIG_MEM_NODE",
    "RIG_GPU_BUS_ID",
    "CUDA_DEVICE_ORDER",
    "MKL_THREADING_LAYER",
)
# One write(2) per line: two ranks share the container's stdout.
os.write(
    1,
    (
        "PROBE "
        + json.dumps(
            {
                "host": socket.gethostname(),
                "affinity": sorted(os.sched_getaffinity(0)),
                "env": {k: os.environ.get(k) for k in keys},
                "sum": total.item(),
                "mempolicy": [mode.value, mask[0]] if rc == 0 else None,
            }
        )
        + "\n"
    ).encode(),
)
dist.destroy_process_group()
