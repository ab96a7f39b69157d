"""yolo-rig: the entrypoint of the YOLO training image."""

import os

__version__ = "0.2.0"  # pyproject.toml's, which tests/unit/test_makefile.py holds it to

# The environment as rig found it, before any import could change it (importing Ultralytics sets
# OMP_NUM_THREADS=1 when it is unset): decisions about the user's variables read this.
USER_ENVIRON: dict[str, str] = dict(os.environ)
