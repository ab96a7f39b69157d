"""Make this Python's environment the lent GPU box's, less its GPU: every distribution that is neither
on the box's list (argv[1], tools/gpu-box-packages.txt) nor needed by one that is (the image's torch
needs its CUDA 12 libraries where the box's has CUDA 13's) is removed, files and metadata, as
`pip uninstall` would. Prints one line naming what went. Run as root in a throwaway container."""

from __future__ import annotations

import re
import shutil
import sys
from importlib import metadata
from pathlib import Path


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main(box_list: str) -> int:
    box = {
        normalize(line.split("#")[0].split("==")[0].strip())
        for line in Path(box_list).read_text().splitlines()
    }
    box.discard("")
    installed = {normalize(d.metadata["Name"]): d for d in metadata.distributions()}
    keep, todo = set(), [n for n in installed if n in box]
    while todo:
        name = todo.pop()
        if name in keep or name not in installed:
            continue
        keep.add(name)
        for req in installed[name].requires or []:
            if "extra ==" not in req:  # a dependency of the distribution itself, not of an extra
                todo.append(normalize(re.split(r"[ ;<>=!~\[(]", req, maxsplit=1)[0]))
    gone = sorted(set(installed) - keep)
    folders: set[Path] = set()
    for name in gone:
        dist = installed[name]
        for f in dist.files or []:
            path = Path(str(dist.locate_file(f)))
            if path.is_file() or path.is_symlink():
                path.unlink()
                folders.add(path.parent)
        info = Path(str(dist._path))  # type: ignore[attr-defined]  # its .dist-info folder
        shutil.rmtree(info, ignore_errors=True)
    # The folders left holding only bytecode (compiled after the install, so in no RECORD), deepest
    # first: else a bare folder still imports, as a namespace package.
    for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        while folder.is_dir() and all(c.name == "__pycache__" for c in folder.iterdir()):
            shutil.rmtree(folder)
            folder = folder.parent
    print(f"INFO box_venv: kept {len(keep)} distributions, removed {len(gone)}: {' '.join(gone)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
