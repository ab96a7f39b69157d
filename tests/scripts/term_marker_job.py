"""A job that saves on SIGTERM: 3 s of "cleanup" (a checkpoint being written), then a marker naming
the signal. SIGHUP or SIGKILL would end it without one."""

import pathlib
import signal
import sys
import time

name = sys.argv[1]
out = pathlib.Path("/workspace/markers")


def on_term(signum, frame):
    time.sleep(3)
    (out / name).write_text(signal.Signals(signum).name)
    sys.exit(0)


signal.signal(signal.SIGTERM, on_term)
(out / (name + ".ready")).touch()
while True:
    time.sleep(1)
