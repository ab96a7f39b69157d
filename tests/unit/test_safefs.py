"""rig.safefs: what root does where a user can write, tried with hostile links."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from rig import safefs

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
