"""`python -m rig.launch.torchrun ARGS`: torchrun, with the stop deadline the environment gives.

On SIGTERM, SIGINT or SIGHUP torchrun forwards the signal to its ranks and kills them 30 s later
(torch 2.3's fixed `PContext.close(timeout=30)`), whatever grace Docker, Kubernetes or Slurm give:
a rank still finishing a long batch or a validation pass loses its epoch. Here those 30 s become
RIG_STOP_GRACE (rig.launch.ddp). For `rig train` it also serves the node's /metrics
(rig.observe.metrics) while its ranks run. Everything else is torchrun's own `main`.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from rig.errors import RigError
from rig.launch import ddp
from rig.observe import metrics


def install(grace_s: int) -> None:
    """Make every torchrun process context wait grace_s (not 30 s) before it kills its ranks."""
    api: Any = importlib.import_module("torch.distributed.elastic.multiprocessing.api")
    original = getattr(api.PContext.close, "rig_original", api.PContext.close)

    def close(self: Any, death_sig: Any = None, timeout: int = 30) -> None:
        original(self, death_sig, max(timeout, grace_s))

    close.rig_original = original  # type: ignore[attr-defined]
    api.PContext.close = close


def main() -> int:
    try:
        grace = ddp.stop_grace(os.environ)
    except RigError as e:
        print(f"ERROR torchrun: {e}", file=sys.stderr)
        return 2
    install(grace)
    node = metrics.serve_node(os.environ, launcher=True)  # rig train's: this node's /metrics
    run: Any = importlib.import_module("torch.distributed.run")
    try:
        run.main()
    finally:
        if node is not None:
            node.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
