"""The home folder, on the `home` volume: seeded with the image's defaults, never overwritten.

Docker copies the image's /home/yolo into a fresh named volume by itself; a host folder mounted
there, or a volume made by an older image, gets nothing. `seed` fills in whatever of SEEDS is
missing: a plain list that other features extend (an image file copied when absent, a folder
created when absent); what the user changed or made is never touched. `prepare` runs it as yolo in
a child with a deadline (rig.workstation.asuser): root never acts inside the home folder, and each
step works on descriptors without following a link (rig.safefs).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from rig import log, paths, safefs
from rig.workstation import asuser, userenv, users

PREPARE_TIMEOUT = 20.0
MAX_SEED_BYTES = 1 << 20
SKEL = Path("/etc/skel")

_logger = log.get("home")


@dataclass(frozen=True)
class Seed:
    path: str  # relative to the home folder
    source: Path | None = None  # the image's file to copy there; None: a folder


SEEDS: tuple[Seed, ...] = (
    Seed(".bashrc", SKEL / ".bashrc"),
    Seed(".profile", SKEL / ".profile"),
    Seed(".bash_logout", SKEL / ".bash_logout"),
    # Made before the first `pip install`: a kernel or shell started earlier imports from it at once
    # (Python caches a PYTHONPATH folder that did not exist as absent for the process's life).
    Seed(str(userenv.site_packages(Path("/")).relative_to("/"))),
    Seed(str(userenv.scripts(Path("/")).relative_to("/"))),
)


def _seed_one(home_fd: int, item: Seed) -> bool:
    """Create item under home_fd if it is missing; True when something was made."""
    *parents, name = Path(item.path).parts
    fds = [home_fd]
    try:
        for part in parents:
            fds.append(safefs.ensure_dir(part, fds[-1], 0o755))
        if item.source is None:
            made = safefs.describe(name, fds[-1]) == "nothing"
            os.close(safefs.ensure_dir(name, fds[-1], 0o755))
            return made
        if safefs.read_regular(name, fds[-1], MAX_SEED_BYTES) is not None:
            return False
        data = item.source.read_bytes()  # the image's own file
        safefs.write_atomic(name, data, fds[-1], stat.S_IMODE(item.source.stat().st_mode))
        return True
    finally:
        for fd in fds[1:]:
            os.close(fd)


def seed(home: Path = paths.HOME, seeds: tuple[Seed, ...] = SEEDS) -> list[str]:
    """Fill in the missing seeds, as whoever calls; returns the paths made. A link, a file where a
    folder belongs or the reverse is left as it is, with one WARNING."""
    made = []
    with safefs.opened_dir(home) as home_fd:
        for item in seeds:
            try:
                if _seed_one(home_fd, item):
                    made.append(item.path)
            except (OSError, safefs.Skipped) as e:
                _logger.warning("skipped ~/%s: %s; move it away to get the image's default", item.path, e)
    if made:
        _logger.info("home folder %s: seeded %s", home, ", ".join(made))
    return made


def prepare(ids: users.Ids, timeout: float = PREPARE_TIMEOUT) -> bool:
    """seed() as yolo, in a child with a deadline."""
    return asuser.run_as(ids, seed, timeout, "seeding the home folder")
