"""The stop timeout torch's PContext uses once rig's torchrun shim is imported."""

import signal

from rig.launch import torchrun
from torch.distributed.elastic.multiprocessing.api import PContext

seen = []


class Fake:
    """A process context whose ranks are gone: nothing left to end after the close."""

    _stdout_tail = _stderr_tail = None

    def pids(self):
        return {}

    def _close(self, death_sig, timeout):
        seen.append(timeout)


PContext.close(Fake(), signal.SIGTERM)  # as torch's agent calls it: no timeout given
torchrun.install(75)
torchrun.install(75)  # idempotent
PContext.close(Fake(), signal.SIGTERM)
PContext.close(Fake(), signal.SIGTERM, timeout=120)
print("SEEN", seen)
