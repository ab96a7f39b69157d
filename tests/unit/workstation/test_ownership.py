"""rig.workstation.ownership: re-owning what yolo owned when its ids change, never following links."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rig.errors import RigError
from rig.workstation import ownership, users

from tests.helpers import needs_root


@needs_root
def test_follow_ids_reowns_once_and_leaves_foreign_volumes(tmp_path: Path) -> None:
    record = tmp_path / "state" / "yolo-ids"
    mine, host = tmp_path / "workspace", tmp_path / "datasets"
    (mine / "runs").mkdir(parents=True)
    host.mkdir()
    (host / "img.jpg").write_text("x")
    for p in (mine, mine / "runs"):
        os.chown(p, 1000, 1000)
    os.chown(host, 2000, 2000)  # a host folder bind-mounted there: its owner's, not yolo's
    os.chown(host / "img.jpg", 1000, 1000)

    assert ownership.follow_ids(users.Ids(4321, 4322), record, roots=[mine, host]) == 2
    assert (mine / "runs").stat().st_uid == 4321 and (host / "img.jpg").stat().st_uid == 1000
    assert record.read_text() == "4321:4322\n"
    # The next start with the same ids walks nothing; a later change starts from the recorded ids.
    assert ownership.follow_ids(users.Ids(4321, 4322), record, roots=[mine, host]) == 0
    assert ownership.follow_ids(users.Ids(5555, 5555), record, roots=[mine, host]) == 2
    assert (mine / "runs").stat().st_gid == 5555


@needs_root
def test_an_unfinished_reowning_warns_with_the_count_at_every_start_until_done(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    record = tmp_path / "state" / "yolo-ids"
    mine = tmp_path / "workspace"
    (mine / "runs").mkdir(parents=True)
    for p in (mine, mine / "runs"):
        os.chown(p, 1000, 1000)
    for _ in range(2):  # out of time at two starts: two warnings, each with the count
        caplog.clear()
        assert ownership.follow_ids(users.Ids(4321, 4322), record, roots=[mine], budget_s=0) == 0
        warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert len(warned) == 1 and "not finished: 2 entries still belong to uid 1000" in warned[0], warned
    caplog.clear()
    assert ownership.follow_ids(users.Ids(4321, 4322), record, roots=[mine], budget_s=60) == 2
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    assert not record.with_name("yolo-ids-pending").exists() and record.read_text() == "4321:4322\n"
    caplog.clear()
    assert ownership.follow_ids(users.Ids(4321, 4322), record, roots=[mine], budget_s=60) == 0
    assert not caplog.records


def test_bad_reown_budget_is_one_line() -> None:
    assert ownership.budget({}) == 60 and ownership.budget({"RIG_REOWN_BUDGET_S": "5"}) == 5
    with pytest.raises(RigError, match="RIG_REOWN_BUDGET_S='soon'"):
        ownership.budget({"RIG_REOWN_BUDGET_S": "soon"})
