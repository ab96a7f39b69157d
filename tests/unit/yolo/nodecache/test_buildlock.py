"""rig.yolo.nodecache.buildlock: what may be trusted, who holds a lock (a fake /proc), the wait's rule."""

from __future__ import annotations

import fcntl
import os
import re
import stat
from pathlib import Path
from typing import Any

import pytest
from rig import safefs
from rig.errors import RigError
from rig.yolo.nodecache import buildlock

from tests.helpers import needs_root


@pytest.mark.parametrize(
    ("make", "share", "expected"),
    [
        (lambda p: p.chmod(0o644), None, None),
        (lambda p: p.chmod(0o664), None, "can be written by gid 0 (root) (mode 0664)"),  # a group's
        (lambda p: p.chmod(0o664), "0", None),  # ... the one the user named in RIG_SHARE_GROUP
        (lambda p: p.chmod(0o666), "0", "can be written by anyone"),
        (lambda p: os.chown(p, 2002, 2002), None, "belongs to uid 2002, not to you"),
        (lambda p: (p.unlink(), os.mkfifo(p)), None, "is a FIFO, not a regular file"),
        (lambda p: (p.unlink(), p.symlink_to("/etc/hostname")), None, "is a symbolic link, not a regular"),
    ],
    ids=["mine", "group-writable", "shared group", "anyone", "another user's", "fifo", "link"],
)
@needs_root
def test_cache_files_follow_the_one_trust_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make: Any, share: str | None, expected: str | None
) -> None:
    if share is not None:
        monkeypatch.setenv(safefs.SHARE_GROUP_ENV, share)
    path = tmp_path / "k.img"
    path.write_bytes(b"x")
    make(path)
    if expected is None:
        os.close(buildlock.open_own(path))
    else:
        with pytest.raises(buildlock.Refused, match=re.escape(expected)):
            buildlock.open_own(path)


LOCKS = """\
1: FLOCK  ADVISORY  WRITE 4242 08:02:1311 0 EOF
1: -> FLOCK  ADVISORY  WRITE 77 08:02:1311 0 EOF
2: FLOCK  ADVISORY  READ 99 08:02:5555 0 EOF
3: POSIX  ADVISORY  WRITE 13 00:2e:1311 0 EOF
"""


def test_holders_are_the_lines_of_the_file_without_waiters() -> None:
    dev = os.makedev(8, 2)
    assert buildlock.holders(LOCKS, dev, 1311) == [4242]
    assert buildlock.holders(LOCKS, dev, 5555) == [99]
    # An overlay reports its own device: the inode alone, when nothing matches both.
    assert buildlock.holders(LOCKS, os.makedev(0, 99), 1311) == [4242, 13]
    assert buildlock.holders("", dev, 1311) == []


def test_holder_in_words_from_a_fake_proc(tmp_path: Path) -> None:
    lock = tmp_path / "k.lock"
    lock.write_text("")
    st = lock.stat()
    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    (proc / "4242/cmdline").write_bytes(b"python\0-m\0rig.launch.trainer\0data=\x1b[31mx\0")
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    (proc / "locks").write_text(f"1: FLOCK  ADVISORY  WRITE 4242 {where} 0 EOF\n")
    fd = os.open(lock, os.O_RDONLY)
    try:
        assert buildlock.holder(fd, proc) == "pid 4242 (python -m rig.launch.trainer data=\\x1b[31mx)"
        (proc / "locks").write_text("")
        assert "cannot see" in buildlock.holder(fd, proc)
    finally:
        os.close(fd)


def test_the_wait_goes_on_while_the_holder_grows_and_ends_when_it_stalls(tmp_path: Path) -> None:
    lock = tmp_path / "k.lock"
    lock.write_text("")
    held = os.open(lock, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)
    fd = os.open(lock, os.O_RDONLY)
    now = [0.0]
    sizes = iter([0, 10, 20, 30] + [30] * 100)  # grows for 3 polls, then stops
    told: list[str] = []
    wait = buildlock.Wait(
        5.0,
        progress=lambda: next(sizes),
        on_wait=told.append,
        proc=tmp_path,  # no locks file: a holder it cannot see
        clock=lambda: now[0],
        sleep=lambda s: now.__setitem__(0, now[0] + 1.0),
    )
    try:
        with pytest.raises(buildlock.Stalled, match=r"no progress for 5 s \(end that process, or raise RIG_"):
            buildlock.flock(fd, fcntl.LOCK_EX, wait)
        assert now[0] == 2 + 5  # growth seen at 0, 1 and 2 s, then 5 s without
        assert len(told) == 1 and "cannot see" in told[0]
        os.close(held)
        held = -1
        buildlock.flock(fd, fcntl.LOCK_EX, wait)  # free: taken at once
    finally:
        os.close(fd)
        if held >= 0:
            os.close(held)


@pytest.mark.parametrize("bad", ["x", "-1", "nan", "inf"])
def test_a_bad_stall_limit_is_one_line(bad: str) -> None:
    with pytest.raises(
        RigError, match=rf"^RIG_CACHE_LOCK_STALL_S='{bad}': use a number of seconds >= 0 \(default 60\)"
    ):
        buildlock.stall_s({buildlock.STALL_ENV: bad})
    assert buildlock.stall_s({}) == 60 and buildlock.stall_s({buildlock.STALL_ENV: "2.5"}) == 2.5


def test_open_lock_replaces_what_was_planted(tmp_path: Path) -> None:
    for plant in (lambda p: os.mkfifo(p), lambda p: p.mkdir(), lambda p: p.symlink_to(tmp_path / "t")):
        path = tmp_path / "k.lock"
        plant(path)
        fd = buildlock.open_lock(path)
        os.close(fd)
        assert stat.S_ISREG(os.lstat(path).st_mode) and not (tmp_path / "t").exists()
        path.unlink()


def test_rig_train_with_a_bad_stall_limit_is_one_line_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rig import cli

    monkeypatch.setenv(buildlock.STALL_ENV, "soon")
    monkeypatch.setattr(os, "execvpe", lambda *a: pytest.fail("launched"))
    assert (
        cli.main(["train", "device=cpu", "data=x.yaml", "model=m.yaml", f"project={tmp_path / 'runs'}"]) == 1
    )
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("INFO")]
    said = f"ERROR rig: {buildlock.STALL_ENV}='soon': use a number of seconds >= 0 (default 60); "
    assert err == [
        said
        + "how long a wait for another process's image cache build may go on while that build does not grow"
    ]
    assert not (tmp_path / "runs").exists()
