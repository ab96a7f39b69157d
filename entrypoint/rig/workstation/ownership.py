"""A changed RIG_UID/RIG_GID re-owns what user yolo owned in the volumes.

The volumes outlive the container, so files made by yolo under its previous ids would stay out of
reach of the new yolo (a `runs/` it cannot write). The ids yolo had are recorded in the state
volume at every start (root's only); when they change, every entry of a user volume that had the
old uid (gid) gets the new one. Only volumes whose top folder still belongs to the old ids are
walked: a host folder bind-mounted there belongs to its host user and is left as it is. The walk
never follows a link (rig.safefs.reown_tree) and has one time budget for all volumes; what it could
not finish is recorded and walked again at every start, each time with a WARNING saying how much is
left, until done.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from rig import envnumbers, log, paths, safefs, userids
from rig.workstation import users

RECORD = paths.STATE / "yolo-ids"
# The ids a re-owning that ran out of time started from: walked again at every start until done.
PENDING = paths.STATE / "yolo-ids-pending"
IMAGE_IDS = users.Ids(1000, 1000)  # the Dockerfile's `useradd --uid 1000`
BUDGET_S = 60.0  # for all volumes together, at one start; RIG_REOWN_BUDGET_S changes it
COUNT_S = 10.0  # then this long more to count what is left, for the WARNING

_logger = log.get("users")


def read_record(record: Path = RECORD) -> users.Ids | None:
    try:
        uid, gid = (int(x) for x in record.read_text().split(":"))
    except (OSError, ValueError):
        return None
    return users.Ids(uid, gid)


def _write_record(record: Path, ids: users.Ids) -> None:
    with contextlib.suppress(OSError):  # a full disk: the next start tries again
        record.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        safefs.write_file(record, f"{ids.uid}:{ids.gid}\n".encode(), mode=0o644)


BUDGET = envnumbers.Number(
    "RIG_REOWN_BUDGET_S",
    low=0,
    high=86400,
    default=BUDGET_S,
    unit="seconds",
    hint="the time the volumes' re-owning may take at a start",
)


def budget(environ: Mapping[str, str]) -> float:
    return BUDGET.read(environ)


def follow_ids(
    ids: users.Ids,
    record: Path = RECORD,
    roots: Sequence[Path] = paths.USER_VOLUMES,
    budget_s: float = BUDGET_S,
    pending: Path | None = None,
) -> int:
    """Re-own what the previous ids owned under roots (and what an unfinished re-owning left);
    returns how many entries changed. Unfinished: one WARNING with the count left, at every start."""
    pending = pending if pending is not None else record.with_name(PENDING.name)
    sources = [i for i in dict.fromkeys([read_record(pending), read_record(record) or IMAGE_IDS]) if i]
    sources = [i for i in sources if i != ids]
    changed = 0
    unfinished: users.Ids | None = None
    deadline = time.monotonic() + budget_s
    for previous in sources:
        before = changed
        for root in roots:
            try:
                top = root.lstat()
            except OSError:
                continue
            if top.st_uid not in (previous.uid, ids.uid) or (
                top.st_uid == ids.uid and read_record(pending) != previous
            ):
                continue  # a host folder bind-mounted there: its owner's
            result = safefs.reown_tree(
                root,
                (previous.uid, previous.gid),
                (ids.uid, ids.gid),
                deadline,
                count_deadline=max(deadline, time.monotonic()) + COUNT_S,
            )
            changed += result.changed
            if not result.complete:
                unfinished = previous
                _logger.warning(
                    "re-owning %s for uid %d is not finished: %s%d entries still belong to uid %d gid %d "
                    "(RIG_REOWN_BUDGET_S=%g s per start); it goes on at the next start, or finish it now "
                    "with `docker compose exec workstation chown -R -h --from=%d:%d %d:%d %s`",
                    root,
                    ids.uid,
                    "" if result.counted else "at least ",
                    result.left,
                    previous.uid,
                    previous.gid,
                    budget_s,
                    previous.uid,
                    previous.gid,
                    ids.uid,
                    ids.gid,
                    root,
                )
        if changed > before:
            _logger.info(
                "gave %d file(s) in the volumes from uid %d gid %d to uid %d gid %d (%s)",
                changed - before,
                previous.uid,
                previous.gid,
                ids.uid,
                ids.gid,
                userids.BOTH,
            )
    if unfinished is not None:
        _write_record(pending, unfinished)
    else:
        with contextlib.suppress(OSError):
            pending.unlink(missing_ok=True)
    if read_record(record) != ids:
        _write_record(record, ids)
    return changed
