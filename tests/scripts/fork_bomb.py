"""Forks until the kernel refuses (bounded: at most 1000), then ends every child."""

import os
import signal
import time

children = []
try:
    for _ in range(1000):
        pid = os.fork()
        if pid == 0:
            time.sleep(120)
            os._exit(0)
        children.append(pid)
    print("never stopped", len(children))
except OSError as e:
    print("stopped at", len(children), e.strerror)
for pid in children:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
