"""rig's next run directory beside Ultralytics' increment_path, three times:
`RUNDIRS [[ours, theirs], ...]`."""

import json
import tempfile
from pathlib import Path

from rig.launch.job import next_run_dir
from ultralytics.utils.files import increment_path

project = Path(tempfile.mkdtemp())
pairs = []
for _ in range(3):
    ours, theirs = next_run_dir(project, "train", False), increment_path(project / "train")
    pairs.append([ours.name, theirs.name])
    ours.mkdir()
print("RUNDIRS " + json.dumps(pairs))
