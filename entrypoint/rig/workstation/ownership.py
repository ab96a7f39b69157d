"""A changed RIG_UID/RIG_GID re-owns what user yolo owned in the volumes.

The volumes outlive the container, so files made by yolo under its previous ids would stay out of
reach of the new yolo (a `runs/` it cannot write). The ids yolo had are recorded in the state
volume at every start (root's only); when they change, every entry of a user volume that had the
old uid (gid) gets the new one. Only volumes whose top folder still belongs to the old ids are
walked: a host folder bind-mounted there belongs to its host user and is left as it is. The walk
never follows a link (rig.safefs.reown_tree) and has a time budget.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from pathlib import Path

from rig import log, paths, safefs
from rig.workstation import users

RECORD = paths.STATE / "yolo-ids"
IMAGE_IDS = users.Ids(1000, 1000)  # the Dockerfile's `useradd --uid 1000`
BUDGET_S = 60.0

_logger = log.get("users")


def read_record(record: Path = RECORD) -> users.Ids | None:
    try:
        uid, gid = (int(x) for x in record.read_text().split(":"))
    except (OSError, ValueError):
        return None
    return users.Ids(uid, gid)


def follow_ids(
    ids: users.Ids,
    record: Path = RECORD,
    roots: Sequence[Path] = paths.USER_VOLUMES,
    budget_s: float = BUDGET_S,
) -> int:
    """Re-own what the previous ids owned under roots; returns how many entries changed."""
    previous = read_record(record) or IMAGE_IDS
    changed = 0
    if previous != ids:
        deadline = time.monotonic() + budget_s
        for root in roots:
            try:
                top = root.lstat()
            except OSError:
                continue
            if (top.st_uid, top.st_gid) == (ids.uid, ids.gid) or top.st_uid != previous.uid:
                continue
            result = safefs.reown_tree(root, (previous.uid, previous.gid), (ids.uid, ids.gid), deadline)
            changed += result.changed
            if not result.complete:
                _logger.warning(
                    "re-owning %s for uid %d took longer than %.0f s and stopped; finish it with "
                    "`docker compose exec workstation chown -R --from=%d:%d %d:%d %s`",
                    root,
                    ids.uid,
                    budget_s,
                    previous.uid,
                    previous.gid,
                    ids.uid,
                    ids.gid,
                    root,
                )
        if changed:
            _logger.info(
                "gave %d file(s) in the volumes from uid %d gid %d to uid %d gid %d (RIG_UID/RIG_GID)",
                changed,
                previous.uid,
                previous.gid,
                ids.uid,
                ids.gid,
            )
    if read_record(record) != ids:
        with contextlib.suppress(OSError):
            record.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            safefs.write_file(record, f"{ids.uid}:{ids.gid}\n".encode(), mode=0o644)
    return changed
