"""rig's run directory claims beside Ultralytics' increment_path, three times:
`RUNDIRS [[ours, theirs], ...]`."""

import json
import tempfile
from pathlib import Path

from rig.launch import rundir
from ultralytics.utils.files import increment_path

project = Path(tempfile.mkdtemp())
pairs = []
for _ in range(3):
    theirs = increment_path(project / "train")
    ours = rundir.claim(project, "train", None)
    pairs.append([ours.name, theirs.name])
print("RUNDIRS " + json.dumps(pairs))
