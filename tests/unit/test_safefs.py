"""rig.safefs: what root does where a user can write, tried with hostile links."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from rig import safefs
from rig.errors import RigError

from tests.helpers import needs_root


def test_read_regular_refuses_everything_but_a_bounded_regular_file(tmp_path: Path) -> None:
    (tmp_path / "ok").write_bytes(b"data")
    (tmp_path / "big").write_bytes(b"x" * 2048)
    (tmp_path / "link").symlink_to(tmp_path / "ok")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    fd = safefs.open_dir(tmp_path)
    try:
        assert safefs.read_regular("ok", fd, 1024) == b"data"
        assert safefs.read_regular("absent", fd, 1024) is None
        for name, why in [
            ("big", "larger than"),
            ("link", "a symbolic link"),
            ("fifo", "a FIFO"),
            ("dir", "a folder"),
        ]:
            with pytest.raises(safefs.Skipped, match=why):
                safefs.read_regular(name, fd, 1024)
    finally:
        os.close(fd)


def test_write_atomic_replaces_a_planted_link_and_sets_mode_on_the_descriptor(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    victim.chmod(0o600)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "target").symlink_to(victim)
    with safefs.opened_dir(tmp_path / "d") as fd:
        safefs.write_atomic("target", b"new", fd, mode=0o640)
    assert victim.read_text() == "precious" and oct(victim.stat().st_mode & 0o777) == "0o600"
    written = tmp_path / "d" / "target"
    assert not written.is_symlink() and written.read_text() == "new"
    assert oct(written.stat().st_mode & 0o777) == "0o640"
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["target"]  # no temporary file left


def test_open_dir_refuses_a_link(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    with pytest.raises(safefs.Skipped, match="not a folder"):
        safefs.open_dir(tmp_path / "link")
    with safefs.opened_dir(tmp_path) as fd, pytest.raises(safefs.Skipped, match="a symbolic link"):
        safefs.ensure_dir("link", fd)


@needs_root
def test_reown_tree_changes_only_the_old_owner_and_never_follows_links(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "root-file").write_text("x")
    os.chown(outside, 1000, 1000)  # even a target the old uid owns is not reached through a link
    vol = tmp_path / "vol"
    (vol / "runs" / "exp").mkdir(parents=True)
    (vol / "runs" / "exp" / "last.pt").write_text("w")
    (vol / "other").write_text("someone else's")
    (vol / "link-dir").symlink_to(outside, target_is_directory=True)
    (vol / "runs" / "link-file").symlink_to(outside / "root-file")
    for path in (vol, vol / "runs", vol / "runs" / "exp", vol / "runs" / "exp" / "last.pt"):
        os.chown(path, 1000, 1000)
    for link in (vol / "link-dir", vol / "runs" / "link-file"):
        os.chown(link, 1000, 1000, follow_symlinks=False)
    os.chown(vol / "other", 2000, 2000)

    result = safefs.reown_tree(vol, (1000, 1000), (4321, 4322), deadline=time.monotonic() + 30)
    assert result.complete and result.changed == 6
    for path in (vol, vol / "runs", vol / "runs" / "exp", vol / "runs" / "exp" / "last.pt"):
        assert (path.stat().st_uid, path.stat().st_gid) == (4321, 4322), path
    assert os.lstat(vol / "link-dir").st_uid == 4321  # the link itself
    assert (outside.stat().st_uid, (outside / "root-file").stat().st_uid) == (1000, 0)
    assert (vol / "other").stat().st_uid == 2000


@needs_root
def test_reown_tree_stops_at_its_deadline(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    os.chown(tmp_path / "a" / "b", 1000, 1000)
    result = safefs.reown_tree(tmp_path, (1000, 1000), (5, 5), deadline=time.monotonic() - 1)
    assert not result.complete
    assert (tmp_path / "a" / "b").stat().st_uid == 1000


@needs_root
def test_reown_tree_walks_any_depth_and_counts_what_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    os.chown(tmp_path, 1000, 1000)
    fd = os.open(tmp_path, os.O_RDONLY)
    for _ in range(1500):  # deeper than Python's recursion limit (and than pathlib's rglob goes)
        os.mkdir("d", dir_fd=fd)
        os.chown("d", 1000, 1000, dir_fd=fd)
        fd, parent = os.open("d", os.O_RDONLY, dir_fd=fd), fd
        os.close(parent)
    os.close(os.open("last.pt", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    os.chown("last.pt", 1000, 1000, dir_fd=fd)
    os.chdir(fd)  # the deepest folder, to look at last.pt below
    os.close(fd)
    late = safefs.reown_tree(tmp_path, (1000, 1000), (5, 5), deadline=time.monotonic() - 1)
    assert (late.complete, late.changed, late.left, late.counted) == (False, 0, 1502, True)
    done = safefs.reown_tree(tmp_path, (1000, 1000), (5, 5), deadline=time.monotonic() + 60)
    assert (done.complete, done.changed, done.left) == (True, 1502, 0)
    assert os.stat("last.pt").st_uid == 5
    os.chdir(tmp_path)
    subprocess.run(["rm", "-rf", "d"], check=True)  # shutil.rmtree (pytest's cleanup) recurses


def test_read_input_follows_links_but_reads_only_a_bounded_regular_file(tmp_path: Path) -> None:
    (tmp_path / "ok").write_bytes(b"data")
    (tmp_path / "link").symlink_to(tmp_path / "ok")  # the user's own link: followed
    (tmp_path / "big").write_bytes(b"x" * 2048)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    assert safefs.read_input(tmp_path / "link", 1024) == b"data"
    assert safefs.not_regular(tmp_path / "link") is None
    with pytest.raises(FileNotFoundError):
        safefs.read_input(tmp_path / "absent", 1024)
    for name, why in [
        ("big", r"larger than 1024 bytes \(2048 bytes\)"),
        ("fifo", "a FIFO"),
        ("dir", "a folder"),
    ]:
        with pytest.raises(safefs.Skipped, match=why):
            safefs.read_input(tmp_path / name, 1024)  # the FIFO: refused at once, no writer waited for
    assert [safefs.not_regular(tmp_path / n) for n in ("fifo", "dir", "absent")] == [
        "a FIFO",
        "a folder",
        "nothing",
    ]


# ---- the one trust rule (OpenSSH's safe_path, sudo's checks) ------------------------------------------
A, B, TEAM, OTHER = 2001, 2002, 3000, 3001


@pytest.mark.parametrize(
    ("folder", "mode", "owner", "group", "share", "says"),
    [
        (True, 0o755, A, A, None, None),
        (True, 0o700, 0, 0, None, None),  # root's
        (True, 0o755, B, B, None, "belongs to uid 2002, not to you (uid 2001) or root"),
        (True, 0o775, A, OTHER, None, "can be written by gid 3001 (mode 0775); chmod g-w it, or set"),
        (True, 0o2775, 0, TEAM, None, "can be written by gid 3000 (mode 2775)"),  # a team share
        (True, 0o2775, 0, TEAM, TEAM, None),  # ... the group the user named in RIG_SHARE_GROUP
        (True, 0o777, A, TEAM, TEAM, "can be written by anyone (mode 0777)"),
        (True, 0o1777, 0, 0, None, None),  # /tmp: sticky, root's
        (True, 0o1777, A, A, None, None),  # sticky, the user's own
        (True, 0o1777, B, B, None, "belongs to uid 2002"),  # sticky, but B may rename what is inside
        (True, 0o1770, A, OTHER, None, None),
        (False, 0o644, A, A, None, None),
        (False, 0o600, 0, 0, None, None),
        (False, 0o664, A, OTHER, None, "can be written by gid 3001 (mode 0664)"),
        (False, 0o664, A, TEAM, TEAM, None),
        (False, 0o1666, A, A, None, "can be written by anyone"),  # the sticky bit means nothing on a file
        (False, 0o644, B, B, None, "belongs to uid 2002"),
    ],
)
@needs_root
def test_the_trust_rule(
    tmp_path: Path, folder: bool, mode: int, owner: int, group: int, share: int | None, says: str | None
) -> None:
    entry = tmp_path / "entry"
    entry.mkdir() if folder else entry.write_bytes(b"x")
    os.chown(entry, owner, group)
    os.chmod(entry, mode)
    problem = safefs.distrust(os.lstat(entry), safefs.Trust(A, share), folder=folder)
    assert problem == says if says is None else says in str(problem), problem
    wrong = safefs.distrust(os.lstat(entry), safefs.Trust(A, share), folder=not folder)
    assert wrong is not None and wrong.startswith("is a "), wrong


def _tree(root: Path, *steps: tuple[str, int, int, int]) -> Path:
    """Folders under root, each (name, owner, group, mode); the last one's path."""
    here = root
    for name, owner, group, mode in steps:
        here = here / name
        here.mkdir()
        os.chown(here, owner, group)
        os.chmod(here, mode)
    return here


@needs_root
def test_open_trusted_checks_every_folder_from_the_root_on_its_descriptor(tmp_path: Path) -> None:
    who = safefs.Trust(A)
    # /tmp/.../team (root:team 2775) / alice (A's) / run / weights / last.pt
    run = _tree(tmp_path, ("team", 0, TEAM, 0o2775), ("alice", A, A, 0o755), ("run", A, A, 0o700))
    (run / "last.pt").write_bytes(b"ckpt")
    os.chown(run / "last.pt", A, A)
    with pytest.raises(safefs.Untrusted, match=r"/team can be written by gid 3000") as e:
        safefs.open_trusted(run / "last.pt", who)
    assert e.value.path == tmp_path / "team"
    fd = safefs.open_trusted(run / "last.pt", safefs.Trust(A, TEAM))  # the group A named
    try:
        # What is read is what was checked: the folders renamed and another file put at the path.
        os.rename(tmp_path / "team/alice", tmp_path / "team/alice-old")
        _tree(tmp_path / "team", ("alice", B, B, 0o777), ("run", B, B, 0o777))
        (tmp_path / "team/alice/run/last.pt").write_bytes(b"theirs")
        assert os.pread(fd, 100, 0) == b"ckpt"
    finally:
        os.close(fd)
    # B's sticky 1777 folder above A's own: B owns it, and may rename A's folder away.
    mine = _tree(tmp_path, ("bobs", B, B, 0o1777), ("alice", A, A, 0o700))
    with pytest.raises(safefs.Untrusted, match=r"/bobs belongs to uid 2002"):
        safefs.open_trusted(mine, who, folder=True)
    # A link on the way, whoever made it, is never followed.
    (tmp_path / "link").symlink_to(tmp_path / "team")
    with pytest.raises(safefs.Untrusted, match=r"/link is a symbolic link, not a folder"):
        safefs.open_trusted(tmp_path / "link/alice-old/run/last.pt", safefs.Trust(A, TEAM))
    # A FIFO, a folder where a file is wanted: refused, never blocked on.
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(safefs.Untrusted, match=r"/fifo is a FIFO, not a regular file"):
        safefs.open_trusted(tmp_path / "fifo", safefs.Trust(0))
    with pytest.raises(safefs.Untrusted, match=r"is a folder, not a regular file"):
        safefs.open_trusted(tmp_path, safefs.Trust(0))
    with pytest.raises(FileNotFoundError):
        safefs.open_trusted(tmp_path / "absent/last.pt", who)


@needs_root
def test_open_trusted_makes_missing_folders_never_writable_by_others(tmp_path: Path) -> None:
    old = os.umask(0o002)
    try:
        fd = safefs.open_trusted(tmp_path / "a/b/c", safefs.Trust(0), folder=True, create_mode=0o777)
    finally:
        os.umask(old)
    os.close(fd)
    modes = [stat_mode(tmp_path / p) for p in ("a", "a/b", "a/b/c")]
    assert modes == [0o755, 0o755, 0o755], [oct(m) for m in modes]


def stat_mode(path: Path) -> int:
    return os.stat(path).st_mode & 0o7777


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("²", "RIG_SHARE_GROUP='²' is not a group of this system"),
        ("99999999999999999999", "is not a group id (0 to 4294967294)"),
        ("4294967295", "is not a group id (0 to 4294967294)"),
        ("4242424", "no group has id 4242424 on this system"),
        ("no-such-group", "is not a group of this system"),
        ("a\0b", "is not a group of this system"),
    ],
)
def test_the_share_group_is_a_group_of_this_system(raw: str, says: str) -> None:
    with pytest.raises(RigError, match=re.escape(says)) as e:
        safefs.share_gid({safefs.SHARE_GROUP_ENV: raw})
    assert "\n" not in str(e.value)
    assert safefs.share_gid({}) is None and safefs.share_gid({safefs.SHARE_GROUP_ENV: " "}) is None
    assert safefs.share_gid({safefs.SHARE_GROUP_ENV: "0"}) == 0
    assert safefs.share_gid({safefs.SHARE_GROUP_ENV: "root"}) == 0
