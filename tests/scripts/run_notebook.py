"""Executes the notebook argv[1] with nbclient, as Jupyter would, from its folder."""

import sys
import time

import nbformat
from nbclient import NotebookClient

path = sys.argv[1]
nb = nbformat.read(path, as_version=4)
nbformat.validate(nb)
start = time.monotonic()
NotebookClient(
    nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": "/workspace/notebooks"}}
).execute()
print(f"EXECUTED {path} in {time.monotonic() - start:.0f} s")
