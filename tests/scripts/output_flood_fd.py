"""A flood written straight to the fd 1 the kernel inherited from JupyterLab (the supervisor's pipe)."""

import os
import pathlib
import sys
import time

fd = sys.stdout._original_stdstream_copy
block = b"z" * (1 << 20)
started = time.monotonic()
for _ in range(1536):
    os.write(fd, block)
pathlib.Path("/workspace/flood-direct.done").write_text(f"{time.monotonic() - started:.1f}")
