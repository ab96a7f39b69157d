"""A job that saves on TERM (after a second of work), named by argv[1] as raw bytes (prctl), or not;
argv[2] is the file it writes."""

import ctypes
import pathlib
import signal
import sys
import time

name = bytes.fromhex(sys.argv[1])
if name:
    ctypes.CDLL(None).prctl(15, ctypes.c_char_p(name), 0, 0, 0)  # PR_SET_NAME


def save(*_):
    time.sleep(1)
    pathlib.Path(sys.argv[2]).write_text("saved")
    sys.exit(0)


signal.signal(signal.SIGTERM, save)
open(sys.argv[2] + ".ready", "w").close()
while True:
    time.sleep(1)
