"""A rank that needs longer than torchrun's own 30 s to save after SIGTERM."""

import os
import pathlib
import signal
import sys
import time

out = sys.argv[1]


def on_term(signum, frame):
    time.sleep(33)  # writing a large checkpoint to a slow disk
    pathlib.Path(f"{out}/saved-{os.environ['LOCAL_RANK']}").write_text("ok")
    sys.exit(0)


signal.signal(signal.SIGTERM, on_term)
os.write(1, f"READY {os.environ['LOCAL_RANK']}\n".encode())
while True:
    time.sleep(1)
