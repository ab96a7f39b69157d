"""On PYTHONPATH for tools/gpu_check.sh's training runs: at a process's exit, one PEAK line with torch's
peak CUDA memory (allocated and reserved) where it used CUDA, and the process's peak RSS, for the
check to read from the run's log. Nothing else changes."""

import atexit
import json
import os
import resource
import sys


def _peak() -> None:
    torch = sys.modules.get("torch")
    out = {"pid": os.getpid(), "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    try:
        if torch is not None and torch.cuda.is_initialized():
            out["allocated_mib"] = torch.cuda.max_memory_allocated() / 2**20
            out["reserved_mib"] = torch.cuda.max_memory_reserved() / 2**20
    except Exception as e:  # the figure is missing, the run's exit is not changed
        out["error"] = str(e)[:200]
    if torch is not None and "ultralytics" in sys.modules:  # the training processes, not every helper
        os.write(2, ("PEAK " + json.dumps(out) + "\n").encode())


atexit.register(_peak)
