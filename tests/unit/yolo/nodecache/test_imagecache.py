"""The node image cache's pure parts and its file protocol, with stand-in images (bytes, no numpy)."""

from __future__ import annotations

import logging
import multiprocessing
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rig.errors import RigError
from rig.yolo.nodecache import buildlock, imagecache
from rig.yolo.nodecache.imagecache import Decoded, Entry, FileStamp, Unavailable

from tests.helpers import needs_root
from tests.helpers.bounded import bounded
from tests.helpers.logrecords import Records, capture

SETTINGS = {"imgsz": 640, "channels": 3, "resize": "rect", "ultralytics": "8.4.190", "opencv": "4.10"}
FILES = [FileStamp("/d/a.jpg", 100, 1), FileStamp("/d/b.jpg", 200, 2)]


def fake_decode(i: int) -> Decoded:
    """Image i: (i+1) x 2 pixels of 3 channels, every byte i."""
    return Decoded(bytes([i]) * ((i + 1) * 2 * 3), (i + 1, 2, 3), "|u1", (10 * (i + 1), 20))


def obtain(
    directory: Path, n: int = 3, decode=fake_decode, environ=None, key: str = "k"
) -> imagecache.Obtained:  # type: ignore[no-untyped-def]
    names = [f"/d/{i}.jpg" for i in range(n)]
    return imagecache.obtain(directory, key, names, decode, estimate=1000, threads=2, environ=environ or {})


# ---------------------------------------------------------------------------------------------- key


def test_key_is_stable_and_ignores_file_order() -> None:
    assert imagecache.cache_key(FILES, SETTINGS) == imagecache.cache_key(FILES[::-1], dict(SETTINGS))


@pytest.mark.parametrize(
    "changed",
    [
        [FileStamp("/d/a.jpg", 100, 9), FILES[1]],  # an image rewritten (mtime)
        [FileStamp("/d/a.jpg", 101, 1), FILES[1]],  # ... or resized
        [FILES[0]],  # an image removed
        [*FILES, FileStamp("/d/c.jpg", 1, 1)],  # an image added
    ],
)
def test_key_follows_the_files(changed: list[FileStamp]) -> None:
    assert imagecache.cache_key(changed, SETTINGS) != imagecache.cache_key(FILES, SETTINGS)


@pytest.mark.parametrize(
    "setting",
    [("imgsz", 320), ("channels", 1), ("ultralytics", "8.4.191"), ("opencv", "4.11"), ("resize", "x")],
)
def test_key_follows_the_settings(setting: tuple[str, object]) -> None:
    other = {**SETTINGS, setting[0]: setting[1]}
    assert imagecache.cache_key(FILES, other) != imagecache.cache_key(FILES, SETTINGS)


@pytest.mark.parametrize(
    ("h0", "w0", "imgsz", "expected"),
    [
        (720, 1280, 640, (360, 640)),  # camera frames: long side to imgsz
        (1280, 720, 640, (640, 360)),
        (640, 640, 640, (640, 640)),  # already there: untouched
        (50, 100, 640, (320, 640)),  # small images grow
        (333, 1000, 640, (214, 640)),  # rounded up, as Ultralytics' math.ceil
    ],
)
def test_resized_shape_is_load_images(h0: int, w0: int, imgsz: int, expected: tuple[int, int]) -> None:
    assert imagecache.resized_shape(h0, w0, imgsz) == expected


# --------------------------------------------------------------------------------- header and index


def test_written_file_reads_back(tmp_path: Path) -> None:
    got = obtain(tmp_path)
    index = imagecache.read_index(got.path)
    assert index == got.index
    assert index is not None and index.paths == ("/d/0.jpg", "/d/1.jpg", "/d/2.jpg")
    assert [r.shape for r in index.records] == [(1, 2, 3), (2, 2, 3), (3, 2, 3)]
    assert [r.hw0 for r in index.records] == [(10, 20), (20, 20), (30, 20)]
    raw = got.path.read_bytes()
    assert index.records[0].offset == imagecache.DATA_OFFSET  # pixels page-aligned
    for i, r in enumerate(index.records):
        assert raw[r.offset : r.offset + r.nbytes] == bytes([i]) * r.nbytes


@pytest.mark.parametrize("cut", [1, 100, imagecache.DATA_OFFSET + 5])
def test_a_truncated_file_is_not_a_cache(tmp_path: Path, cut: int) -> None:
    got = obtain(tmp_path)
    raw = got.path.read_bytes()
    got.path.write_bytes(raw[:-cut])
    assert imagecache.read_index(got.path) is None


def test_another_format_is_not_a_cache(tmp_path: Path) -> None:
    got = obtain(tmp_path)
    raw = bytearray(got.path.read_bytes())
    raw[8] = imagecache.VERSION + 1  # the version field
    got.path.write_bytes(bytes(raw))
    assert imagecache.read_index(got.path) is None
    (tmp_path / "zeros.img").write_bytes(bytes(8192))  # a build that never wrote its header
    assert imagecache.read_index(tmp_path / "zeros.img") is None


@pytest.mark.parametrize("sparse", [True, False], ids=["sparse-index", "index-bigger-than-its-images"])
def test_a_header_claiming_a_huge_index_is_not_read(tmp_path: Path, sparse: bool) -> None:
    """A valid header over a 2 GiB sparse file: read_index must not read (allocate) the index."""
    size = 2 << 30
    path = tmp_path / "planted.img"
    index_offset = imagecache.DATA_OFFSET if not sparse else size - 4096
    with open(path, "wb") as f:
        f.write(imagecache.pack_header(1, index_offset, size - index_offset))
        f.truncate(size)  # sparse: no disk used
    assert imagecache.read_index(path) is None


# --------------------------------------------------------------------------------------- protocol


def test_built_once_then_mapped(tmp_path: Path) -> None:
    first, second = obtain(tmp_path), obtain(tmp_path)
    assert first.built and not second.built and first.path == second.path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.img", "k.lock"]


def test_a_partial_file_is_rebuilt_and_a_dead_builds_tmp_removed(tmp_path: Path) -> None:
    good = obtain(tmp_path).path.read_bytes()
    (tmp_path / "k.img").write_bytes(good[: len(good) // 2])  # e.g. a copy cut short
    (tmp_path / "k.12345.tmp").write_bytes(b"half a build")  # a builder killed half-way
    again = obtain(tmp_path)
    assert again.built and again.path.read_bytes() == good
    assert not (tmp_path / "k.12345.tmp").exists()


def test_an_unusable_location_is_unavailable(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(Unavailable, match="not usable"):
        obtain(tmp_path / "file" / "images")


def test_over_budget_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(Unavailable, match="RIG_CACHE_MAX_GB"):
        obtain(tmp_path, environ={"RIG_CACHE_MAX_GB": "0"})
    assert list(tmp_path.glob("*.img")) == []


def test_a_failing_decode_leaves_nothing(tmp_path: Path) -> None:
    def broken(i: int) -> Decoded:
        if i == 2:
            raise FileNotFoundError("Image Not Found /d/2.jpg")
        return fake_decode(i)

    with pytest.raises(FileNotFoundError):
        obtain(tmp_path, decode=broken)
    assert list(tmp_path.glob("*.img")) == [] and list(tmp_path.glob("*.tmp")) == []


def _race(directory: str, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    def slow(i: int) -> Decoded:
        time.sleep(0.05)
        return fake_decode(i)

    queue.put(obtain(Path(directory), n=6, decode=slow).built)


def test_concurrent_processes_build_once(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(tmp_path), queue)) for _ in range(3)]
    for p in procs:
        p.start()
    built = sorted(queue.get(timeout=30) for _ in procs)
    for p in procs:
        p.join(10)
    assert built == [False, False, True]


def test_resident_bytes_of_a_fresh_file(tmp_path: Path) -> None:
    path = obtain(tmp_path).path
    assert 0 < imagecache.resident_bytes(path) <= path.stat().st_size
    assert imagecache.resident_bytes(tmp_path / "missing.img") == 0


# ------------------------------------------------------------------------------------------ prune

GIB = 1 << 30
NOW = 1_000_000.0
DAY = 86400.0


@pytest.mark.parametrize(
    ("entries", "budget", "incoming", "keep", "expected"),
    [
        ([Entry("a", GIB, NOW)], 10 * GIB, GIB, "", []),  # room: nothing goes
        (
            [Entry("old", GIB, NOW - 31 * DAY), Entry("new", GIB, NOW)],
            10 * GIB,
            0,
            "",
            ["old"],
        ),  # unused 31 days
        # over budget: least recently used first, until the new one fits
        (
            [Entry("a", 4 * GIB, NOW - 3), Entry("b", 4 * GIB, NOW - 1), Entry("c", 4 * GIB, NOW - 2)],
            10 * GIB,
            3 * GIB,
            "",
            ["a", "c"],
        ),
        (
            [Entry("a", 8 * GIB, NOW - 9), Entry("b", 4 * GIB, NOW)],
            10 * GIB,
            0,
            "a",
            ["b"],
        ),  # never the one in use
        ([Entry("a", 8 * GIB, NOW - 40 * DAY)], 10 * GIB, 0, "a", []),
    ],
)
def test_prune_plan(entries: list[Entry], budget: int, incoming: int, keep: str, expected: list[str]) -> None:
    got = imagecache.prune_plan(
        entries, now=NOW, budget=budget, incoming=incoming, max_age=30 * DAY, keep=keep
    )
    assert got == expected


def test_prune_removes_dead_tmp_files_only(tmp_path: Path) -> None:
    (tmp_path / "x.1.tmp").write_bytes(b"dead")
    (tmp_path / "y.2.tmp").write_bytes(b"building")
    old = time.time() - imagecache.TMP_STALE_S - 5
    os.utime(tmp_path / "x.1.tmp", (old, old))
    assert imagecache.prune(tmp_path, {}) == ["x.1.tmp"]
    assert (tmp_path / "y.2.tmp").exists()


@pytest.mark.parametrize(
    ("environ", "expected"),
    [({}, 50 * GIB), ({"RIG_CACHE_MAX_GB": "20"}, 20 * GIB), ({"RIG_CACHE_MAX_GB": "0.5"}, GIB // 2)],
)
def test_budget(environ: dict[str, str], expected: int) -> None:
    assert imagecache.max_bytes(environ, 100 * GIB) == expected


@pytest.mark.parametrize("bad", ["x", "-1", "nan", "inf", "1,5"])
def test_a_bad_budget_is_one_line(bad: str) -> None:
    with pytest.raises(
        RigError,
        match=rf"^RIG_CACHE_MAX_GB='{bad}': use a number of GiB >= 0; the node .* \(e\.g\. 20 or 0\.5\)",
    ):
        imagecache.max_bytes({"RIG_CACHE_MAX_GB": bad}, 100 * GIB)


@pytest.mark.parametrize(
    ("environ", "days"),
    [({}, 30.0), ({"RIG_CACHE_MAX_AGE_DAYS": "0"}, 0.0), ({"RIG_CACHE_MAX_AGE_DAYS": "1.5"}, 1.5)],
)
def test_max_age(environ: dict[str, str], days: float) -> None:
    assert imagecache.max_age_s(environ) == days * 86400


@pytest.mark.parametrize("bad", ["x", "-1", "nan", "inf", "1,5"])
def test_a_bad_max_age_is_one_line_not_the_default(bad: str) -> None:
    with pytest.raises(
        RigError,
        match=rf"^RIG_CACHE_MAX_AGE_DAYS='{bad}': use a number of days >= 0 \(default 30\); how long",
    ):
        imagecache.max_age_s({"RIG_CACHE_MAX_AGE_DAYS": bad})


def test_a_file_in_use_is_never_pruned(tmp_path: Path) -> None:
    # Train's cache is mapped (held) by a run; building val's (or another job's) needs the room, and
    # train's is the least recently used: it stays while held, and goes once let go.
    train = obtain(tmp_path, key="train")
    old = time.time() - 3600
    os.utime(train.path, (old, old))
    room_for_one = f"{(train.path.stat().st_blocks * 512 + 500) / GIB:.9f}"  # a fraction of a GiB
    val = obtain(tmp_path, key="val", environ={"RIG_CACHE_MAX_GB": room_for_one})
    assert val.built and train.path.exists() and imagecache.read_index(train.path) == train.index
    os.close(train.held)
    os.close(val.held)
    os.utime(train.path, (old, old))
    assert imagecache.prune(tmp_path, {"RIG_CACHE_MAX_GB": room_for_one}, incoming=1000)[0] == "train.img"
    assert not train.path.exists()


def test_a_file_held_by_a_forked_process_is_never_pruned(tmp_path: Path) -> None:
    # The rank lets go (its descriptor closed) while a loader worker it forked still maps the file.
    train = obtain(tmp_path, key="train")
    ctx = multiprocessing.get_context("fork")
    go, done = ctx.Event(), ctx.Event()
    worker = ctx.Process(target=_hold_until, args=(go, done))
    worker.start()
    try:
        assert go.wait(30)
        os.close(train.held)
        assert imagecache.prune(tmp_path, {"RIG_CACHE_MAX_AGE_DAYS": "0"}) == []
        assert train.path.exists()
    finally:
        done.set()
        worker.join(30)
    assert imagecache.prune(tmp_path, {"RIG_CACHE_MAX_AGE_DAYS": "0"}) == ["train.img"]


def _hold_until(go: Any, done: Any) -> None:
    go.set()
    done.wait(30)


def test_no_file_locks_is_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Lustre without `-o flock`: flock fails with ENOSYS.
    import errno
    import fcntl

    def no_flock(fd: int, op: int) -> None:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    obtain(tmp_path)
    monkeypatch.setattr(fcntl, "flock", no_flock)
    with pytest.raises(Unavailable, match="has no working file locks"):
        obtain(tmp_path)


def test_location_and_switch() -> None:
    assert imagecache.cache_dir({}, euid=1000) == Path("/cache/images")
    assert imagecache.cache_dir({"RIG_CACHE_DIR": "/scratch"}, euid=1000) == Path("/scratch/images")
    # Root never in a user volume (RIG_USER=root): its own folder, as its compile caches.
    assert imagecache.cache_dir({}, euid=0) == Path("/root/.cache/rig/images")
    assert imagecache.cache_dir({"RIG_CACHE_DIR": "/cache/x"}, euid=0) == Path("/root/.cache/rig/images")
    assert imagecache.cache_dir({"RIG_CACHE_DIR": "/scratch"}, euid=0) == Path("/scratch/images")
    assert imagecache.enabled({}) and not imagecache.enabled({"RIG_IMAGE_CACHE": "off"})


# ----------------------------------------------------------------------- what a hostile user leaves


@pytest.fixture
def records() -> Iterator[Records]:
    with capture() as handler:
        yield handler


def other_dataset(tmp_path: Path) -> bytes:
    """A valid cache file of other images than obtain's."""
    elsewhere = tmp_path / "elsewhere"
    got = imagecache.obtain(elsewhere, "k", ["/e/x.jpg", "/e/y.jpg", "/e/z.jpg"], fake_decode,
                            estimate=1000, threads=1, environ={})  # fmt: skip
    os.close(got.held)
    return got.path.read_bytes()


def valid_file(tmp_path: Path, wrong: str = "") -> bytes:
    """A valid file of obtain's images; wrong: its first record's "shape" or "dtype" changed."""
    good = tmp_path / f"good-{wrong}"
    got = imagecache.obtain(good, "k", [f"/d/{i}.jpg" for i in range(3)], fake_decode,
                            estimate=1000, threads=1, environ={})  # fmt: skip
    os.close(got.held)
    raw = bytearray(got.path.read_bytes())
    _, _, _, _, index_offset, _, _ = imagecache.HEADER.unpack_from(raw)
    off, nbytes, h, w, c, dtype, h0, w0 = imagecache.RECORD.unpack_from(raw, index_offset)
    if wrong == "shape":
        h = 999  # 999 x 2 x 3 pixels in 6 bytes
    elif wrong == "dtype":
        dtype = b"|O8"  # numpy's object dtype: file bytes as pointers
    imagecache.RECORD.pack_into(raw, index_offset, off, nbytes, h, w, c, dtype, h0, w0)
    return bytes(raw)


def plant(kind: str, path: Path, tmp_path: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":  # to a valid cache of the same images, owned by someone else's folder
        target = tmp_path / "target.img"
        target.write_bytes(valid_file(tmp_path))
        path.symlink_to(target)
    elif kind == "other-dataset":
        path.write_bytes(other_dataset(tmp_path))
    elif kind in ("wrong-shape", "wrong-dtype"):
        path.write_bytes(valid_file(tmp_path, kind.removeprefix("wrong-")))
    elif kind == "folder":
        path.mkdir()
        (path / "inside").write_text("x")
    elif kind == "world-writable":
        path.write_bytes(valid_file(tmp_path))
        path.chmod(0o666)
    elif kind == "another-user":
        path.write_bytes(valid_file(tmp_path))
        os.chown(path, 12345, 12345)


HOSTILE = ["fifo", "symlink", "other-dataset", "wrong-shape", "wrong-dtype", "folder", "world-writable"]


@pytest.mark.parametrize(
    "kind", [*HOSTILE, pytest.param("another-user", marks=needs_root)]
)  # fmt: skip
def test_what_is_planted_at_the_cache_path_is_rebuilt_with_one_warning(
    tmp_path: Path, kind: str, records: Records
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    plant(kind, cache / "k.img", tmp_path)
    target = (tmp_path / "target.img").read_bytes() if kind == "symlink" else b""
    got = bounded(lambda: obtain(cache))
    assert got.built and imagecache.read_index(got.path) == got.index
    assert not got.path.is_symlink() and got.path.stat().st_uid == os.geteuid()
    warnings = records.lines(logging.WARNING)
    assert len(warnings) == 1 and "not used; the images are cached again" in warnings[0], warnings
    if kind == "symlink":  # the link was removed, never written through
        assert (tmp_path / "target.img").read_bytes() == target
    os.close(got.held)


def test_read_index_refuses_without_opening_what_could_block(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.img")
    assert bounded(lambda: imagecache.read_index(tmp_path / "fifo.img")) is None
    assert bounded(lambda: imagecache.resident_bytes(tmp_path / "fifo.img")) == 0


def test_a_planted_lock_link_is_never_followed(tmp_path: Path) -> None:
    # Root's case: a KEY.lock replaced by a link to where the link's owner may not write.
    victim_dir = tmp_path / "victim"
    victim_dir.mkdir()
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "k.lock").symlink_to(victim_dir / "created-by-root")
    os.mkfifo(cache / "k.7.tmp")  # and a FIFO where a dead build's file would be
    got = bounded(lambda: obtain(cache))
    assert got.built and list(victim_dir.iterdir()) == []
    assert not (cache / "k.lock").is_symlink() and (cache / "k.lock").stat().st_uid == os.geteuid()
    os.close(got.held)


def _hold_lock(path: str, ready: Any, grow: str) -> None:
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    ready.set()
    for _ in range(40 if grow else 600):  # a build that grows for 2 s, or a holder that builds nothing
        if grow:
            with open(grow, "ab") as f:
                f.write(b"x" * 100)
        time.sleep(0.05 if grow else 0.1)


def test_a_lock_held_without_progress_is_given_up_naming_its_holder(tmp_path: Path, records: Records) -> None:
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    holder = ctx.Process(target=_hold_lock, args=(str(tmp_path / "k.lock"), ready, ""))
    holder.start()
    try:
        assert ready.wait(30)
        t0 = time.monotonic()
        with pytest.raises(Unavailable) as e:
            bounded(lambda: obtain(tmp_path, environ={buildlock.STALL_ENV: "1"}))
        assert time.monotonic() - t0 < 10
    finally:
        holder.kill()
        holder.join(10)
    assert f"k.lock is held by pid {holder.pid} (" in str(e.value), e.value
    assert "no progress for 1 s" in str(e.value) and buildlock.STALL_ENV in str(e.value)
    infos = [line for line in records.lines(logging.INFO) if "waiting for" in line]
    assert len(infos) == 1 and f"by pid {holder.pid} (" in infos[0], infos
    assert list(tmp_path.glob("*.img")) == []


def test_a_lock_held_by_a_build_that_grows_is_waited_for(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    growing = str(tmp_path / "k.99.tmp")
    holder = ctx.Process(target=_hold_lock, args=(str(tmp_path / "k.lock"), ready, growing))
    holder.start()
    try:
        assert ready.wait(30)
        got = bounded(lambda: obtain(tmp_path, environ={buildlock.STALL_ENV: "1"}), 60)
    finally:
        holder.join(30)
    assert got.built  # the holder built nothing in the end: built here, after the 2 s it took
    os.close(got.held)


def test_cache_files_and_locks_are_private_and_another_users_folder_is_not_used(tmp_path: Path) -> None:
    old = os.umask(0o002)
    try:
        built = obtain(tmp_path / "images")
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "images").iterdir()}
    assert modes == {"k.img": 0o600, "k.lock": 0o600} and built.built
    assert stat.S_IMODE((tmp_path / "images").stat().st_mode) == 0o700
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 2002, 2002)  # another user made the cache's folder first
    with pytest.raises(Unavailable, match=r"theirs is not usable \(belongs to uid 2002"):
        obtain(theirs)
    os.chown(theirs, 0, 0)
    os.chmod(theirs, 0o777)
    with pytest.raises(Unavailable, match=r"not usable \(can be written by anyone \(mode 0777\)"):
        obtain(theirs)
    assert list(theirs.iterdir()) == []


def test_a_file_renamed_onto_another_key_is_rebuilt_with_one_warning(
    tmp_path: Path, records: Records
) -> None:
    def bright(i: int) -> Decoded:  # the same images, decoded at another size: another key
        d = fake_decode(i)
        return Decoded(bytes([255]) * len(d.data), d.shape, d.dtype, d.hw0)

    small = obtain(tmp_path, key="small")
    os.replace(small.path, tmp_path / "large.img")  # the 32-px file under the 64-px key
    got = obtain(tmp_path, key="large", decode=bright)
    assert got.built and got.index.key == "large"
    warnings = records.lines(logging.WARNING)
    assert len(warnings) == 1 and "was built for other images or settings (key small" in warnings[0], warnings
