"""One decoded-image cache per node: one file, mapped by every rank and every loader worker.

Ultralytics' `cache=ram` decodes the dataset in every DDP rank and keeps each copy in anonymous
memory (8 GPUs: 8 copies, 8x the decoding, a host OOM). Here the images, decoded and resized by
Ultralytics' own `load_image`, go once into a file in RIG_CACHE_DIR; every process maps it, so the
node holds one copy in the page cache, which the kernel can drop under pressure instead of killing
the job, and the next run with the same images maps it again instead of decoding.

The file (`KEY.img`, everything little-endian):
  header   HEADER at offset 0, padded to DATA_OFFSET: magic, version, image count, where the index
           starts and how long it is, the file's size. Written last, so a file without a valid
           header was never finished.
  pixels   each image's bytes, C order, one after the other.
  index    one RECORD per image (offset, bytes, shape, dtype, original height and width), then JSON:
           the key the file was built for and the image paths (a dataset maps its own order onto
           the file by path). A file whose key is not its name's (renamed, copied) is not used.

Build protocol: an existing valid file is mapped at once. Otherwise the first process takes an
flock on `KEY.lock`, builds into `KEY.PID.tmp` and renames it to `KEY.img`; the others wait on the
lock, then find the file. A build killed half-way leaves only a `.tmp`, which is never read and is
removed by the next build of that key (or by pruning once it has not changed for TMP_STALE_S).
Waiting never hangs (rig.yolo.nodecache.buildlock): it goes on while the holder's `.tmp` grows,
says once who holds the lock, and gives the cache up (Unavailable) after RIG_CACHE_LOCK_STALL_S
without progress.

Trust: the cache decides what every rank trains on, so a file is mapped only when it is a regular
file that passes rig.safefs's trust rule (this user's or root's, that nobody else may write but
RIG_SHARE_GROUP's group), opened without following a link or blocking (a
FIFO), whose index fits its own bytes (each image's size is its shape times a plain numeric dtype)
and names exactly the dataset's images. Anything else at `KEY.img` (a link, a FIFO, a folder,
another user's or another dataset's file, a broken index) is removed by the builder, with one
WARNING, and built again. Root (RIG_USER=root) keeps its own cache under /root/.cache/rig, never in
a user volume, as it does torch.compile's caches.

In use: every process that maps `KEY.img` holds a shared flock on it for as long as it may map it
(loader workers forked later, at close_mosaic, open it again by path), and pruning deletes a file
only while it holds the exclusive lock: a file in use is never pruned, however old. A location
without flock (Lustre mounted without `-o flock`) is Unavailable, as a read-only one is.

Pure parts (the key, the header and index, the prune plan, the resize arithmetic) take and return
plain values; numpy is imported only to hand out images.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import hashlib
import json
import math
import mmap
import os
import re
import stat
import struct
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from multiprocessing.pool import ThreadPool
from pathlib import Path
from typing import Any

from rig import envnumbers, flags, log, paths, safefs
from rig.hardware import topology
from rig.yolo.nodecache import buildlock

MAGIC = b"RIGIMG\x00\x01"
INDEX_KEY_BYTES = 64  # the index's JSON beyond its paths: {"key": "<32 hex>", "paths": [...]}
VERSION = 2  # 2: the index records the key
HEADER = struct.Struct("<8sIIQQQQ")  # magic, version, reserved, count, index offset, index size, file size
DATA_OFFSET = 4096  # pixels start page-aligned
MAX_NAME_BYTES = 4096  # PATH_MAX: the longest image path an index holds
RECORD = struct.Struct("<QQIII8sII")  # offset, nbytes, h, w, c, dtype str, h0, w0
SUFFIX = ".img"
CACHE_DIR_ENV = "RIG_CACHE_DIR"  # the cache volume's folder
SUBDIR = "images"  # under CACHE_DIR_ENV, beside torch.compile's caches
TMP_STALE_S = 600  # a .tmp unchanged this long belongs to a dead build
DEFAULT_MAX_FRACTION = 0.5  # of the cache file system, when RIG_CACHE_MAX_GB is not set
DEFAULT_MAX_AGE_DAYS = 30.0
FREE_RESERVE = 1 << 30  # never fill the cache file system to the last GiB
GIB = 1 << 30
SWITCH = "RIG_IMAGE_CACHE"  # off: Ultralytics' own cache=ram, a copy per rank
ROOT_CACHE = Path("/root/.cache/rig")  # root's own, where RIG_CACHE_DIR is a user volume
# numpy dtype strings a decoded image may have: little-endian (or one-byte) unsigned, signed or
# float numbers. Never an object dtype: a view of file bytes as Python objects is a crash.
_DTYPE = re.compile(r"(\|[ui]1|<[uif](2|4|8))")

_logger = log.get("imagecache")


class Unavailable(Exception):
    """The node cache cannot be used here (read-only, full, over budget); the message says why."""


# ---------------------------------------------------------------------------------------------
# Settings and the key (pure)


def enabled(environ: Mapping[str, str]) -> bool:
    return flags.switched_on(environ, SWITCH)


def cache_dir(environ: Mapping[str, str], euid: int | None = None) -> Path:
    """RIG_CACHE_DIR's images folder; root's own (ROOT_CACHE) where that is a user volume: root
    never maps pixels, nor creates files, where a user can write."""
    base = Path(environ.get(CACHE_DIR_ENV) or paths.CACHE)
    root = (os.geteuid() if euid is None else euid) == 0
    if root and any(base.is_relative_to(v) for v in paths.USER_VOLUMES):
        base = ROOT_CACHE
    return base / SUBDIR


MAX_GB = envnumbers.Number(
    "RIG_CACHE_MAX_GB",
    low=0,
    default=None,
    unit="GiB",
    hint="the node image cache's size limit (e.g. 20 or 0.5); unset it for half the cache's file system",
)
MAX_AGE_DAYS = envnumbers.Number(
    "RIG_CACHE_MAX_AGE_DAYS",
    low=0,
    default=DEFAULT_MAX_AGE_DAYS,
    unit="days",
    hint="how long a cached dataset nobody used is kept; 0 removes every one not in use",
)


def max_bytes(environ: Mapping[str, str], fs_total: int) -> int:
    """RIG_CACHE_MAX_GB (GiB, fractions too: 0.5), else DEFAULT_MAX_FRACTION of the cache's file system."""
    if not environ.get(MAX_GB.name, "").strip():
        return int(fs_total * DEFAULT_MAX_FRACTION)
    return int(MAX_GB.read(environ) * GIB)


def max_age_s(environ: Mapping[str, str]) -> float:
    return MAX_AGE_DAYS.read(environ) * 86400


@dataclass(frozen=True)
class FileStamp:
    path: str
    size: int
    mtime_ns: int


def stamp(files: Iterable[str]) -> list[FileStamp]:
    """Each image file's size and modification time: a changed image changes the key."""
    out = []
    for f in files:
        st = os.stat(f)
        out.append(FileStamp(f, st.st_size, st.st_mtime_ns))
    return out


def cache_key(files: Sequence[FileStamp], settings: Mapping[str, Any]) -> str:
    """Everything that changes the decoded pixels: the files (path, size, mtime; in any order) and the
    settings (imgsz, channels, resize mode, the Ultralytics and OpenCV versions), with the format."""
    doc = {
        "format": VERSION,
        "settings": {k: settings[k] for k in sorted(settings)},
        "files": sorted((f.path, f.size, f.mtime_ns) for f in files),
    }
    return hashlib.sha256(json.dumps(doc, separators=(",", ":"), default=str).encode()).hexdigest()[:32]


def resized_shape(h0: int, w0: int, imgsz: int) -> tuple[int, int]:
    """The (h, w) Ultralytics' load_image gives an image in its cache (rect_mode: long side to imgsz)."""
    r = imgsz / max(h0, w0)
    if r == 1:
        return h0, w0
    return min(math.ceil(h0 * r), imgsz), min(math.ceil(w0 * r), imgsz)


# ---------------------------------------------------------------------------------------------
# Header and index (pure)


@dataclass(frozen=True)
class Record:
    offset: int
    nbytes: int
    shape: tuple[int, ...]  # (h, w, c)
    dtype: str  # numpy's dtype.str, e.g. "|u1"
    hw0: tuple[int, int]  # the original (h, w)

    @property
    def hw(self) -> tuple[int, int]:
        return self.shape[0], self.shape[1]


@dataclass(frozen=True)
class Index:
    records: tuple[Record, ...]
    paths: tuple[str, ...]
    key: str = ""  # the key it was built for (cache_key)

    @property
    def data_bytes(self) -> int:
        return sum(r.nbytes for r in self.records)


def pack_header(count: int, index_offset: int, index_size: int) -> bytes:
    return HEADER.pack(MAGIC, VERSION, 0, count, index_offset, index_size, index_offset + index_size)


def pack_index(index: Index) -> bytes:
    parts = [RECORD.pack(r.offset, r.nbytes, *r.shape, r.dtype.encode(), *r.hw0) for r in index.records]
    return b"".join(parts) + json.dumps({"key": index.key, "paths": list(index.paths)}).encode()


def unpack(header: bytes, index_bytes: Callable[[int, int], bytes], file_size: int) -> Index | None:
    """The index of a finished file, or None: not ours, another format version, a size that does
    not match (truncated, or never finished), a broken index."""
    if len(header) < HEADER.size:
        return None
    magic, version, _, count, index_offset, index_size, size = HEADER.unpack_from(header)
    if magic != MAGIC or version != VERSION or size != file_size or index_offset + index_size != size:
        return None
    if index_offset < DATA_OFFSET or count * RECORD.size > index_size:
        return None
    # What an index of `count` images can need: the records and their names (JSON, escaped at most
    # six bytes a byte). A header that claims more is not ours: reading it would allocate that much
    # in every rank (a 2 GiB sparse file did).
    if index_size > count * (RECORD.size + 6 * MAX_NAME_BYTES + 4) + 2 + INDEX_KEY_BYTES:
        return None
    raw = index_bytes(index_offset, index_size)
    if len(raw) != index_size:
        return None
    records = []
    for i in range(count):
        off, nbytes, h, w, c, raw_dtype, h0, w0 = RECORD.unpack_from(raw, i * RECORD.size)
        dtype = raw_dtype.rstrip(b"\0").decode()
        if off < DATA_OFFSET or off + nbytes > index_offset or not _fits(nbytes, (h, w, c), dtype):
            return None
        records.append(Record(off, nbytes, (h, w, c), dtype, (h0, w0)))
    try:
        doc = json.loads(raw[count * RECORD.size :])
    except ValueError:
        return None
    names, key = (doc.get("paths"), doc.get("key")) if isinstance(doc, dict) else (None, None)
    if not isinstance(names, list) or len(names) != count or not isinstance(key, str):
        return None
    return Index(tuple(records), tuple(str(n) for n in names), key)


def _fits(nbytes: int, shape: tuple[int, int, int], dtype: str) -> bool:
    """Whether an image's bytes are its shape in a plain numeric dtype (see _DTYPE)."""
    if not _DTYPE.fullmatch(dtype) or min(shape) < 1:
        return False
    return nbytes == math.prod(shape) * int(dtype[2:])


def read_index(path: Path) -> Index | None:
    """The index of a finished cache file of this user's; None for anything else (partial, stale
    format, missing, not a regular file of this user's: see buildlock.open_own)."""
    try:
        fd = buildlock.open_own(path)
    except (OSError, buildlock.Refused):
        return None
    try:
        return _read_index(fd)
    finally:
        os.close(fd)


def _read_index(fd: int) -> Index | None:
    size = os.fstat(fd).st_size

    def at(offset: int, n: int) -> bytes:
        # We write the index in full: a hole in it (a sparse file) is no index of ours.
        if n and os.lseek(fd, offset, os.SEEK_HOLE) < offset + n:
            return b""
        return os.pread(fd, n, offset)

    try:
        return unpack(os.pread(fd, HEADER.size, 0), at, size)
    except (OSError, struct.error, UnicodeDecodeError):
        return None


# ---------------------------------------------------------------------------------------------
# Prune (the plan is pure)


@dataclass(frozen=True)
class Entry:
    name: str
    size: int
    last_used: float  # the file's mtime: set at build, touched on every use


def prune_plan(
    entries: Sequence[Entry], *, now: float, budget: int, incoming: int, max_age: float, keep: str = ""
) -> list[str]:
    """What to delete: entries unused for max_age, then the least recently used until what stays plus
    `incoming` fits the budget. `keep` (the entry being used) is never deleted."""
    doomed = [e.name for e in entries if e.name != keep and now - e.last_used > max_age]
    left = sorted((e for e in entries if e.name not in doomed), key=lambda e: e.last_used)
    total = sum(e.size for e in left) + incoming
    for e in left:
        if total <= budget:
            break
        if e.name == keep:
            continue
        doomed.append(e.name)
        total -= e.size
    return doomed


def entries(directory: Path) -> list[Entry]:
    out = []
    for p in directory.glob(f"*{SUFFIX}"):
        with contextlib.suppress(OSError):
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode):
                out.append(Entry(p.name, st.st_blocks * 512, st.st_mtime))
    return out


def prune(directory: Path, environ: Mapping[str, str], incoming: int = 0, keep: str = "") -> list[str]:
    """Delete old entries and dead builds' temporary files; returns the names deleted. A mapped file
    that is deleted stays readable to whoever maps it until they let go."""
    now = time.time()
    try:
        fs = os.statvfs(directory)
    except OSError:
        return []
    budget = max_bytes(environ, fs.f_blocks * fs.f_frsize)
    doomed = prune_plan(
        entries(directory), now=now, budget=budget, incoming=incoming, max_age=max_age_s(environ), keep=keep
    )
    for p in directory.glob("*.tmp"):
        with contextlib.suppress(OSError):
            if now - p.stat().st_mtime > TMP_STALE_S:
                doomed.append(p.name)
    return [name for name in doomed if _unlink_unless_in_use(directory / name)]


def _unlink_unless_in_use(path: Path) -> bool:
    """Delete path unless a process holds it (rig.yolo.nodecache.imagecache.hold): the exclusive lock is held
    across the unlink, so nobody can start holding it in between. True: deleted."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.unlink(path)
        return True
    except OSError:  # held (EWOULDBLOCK), or no flock here: never delete what may be in use
        return False
    finally:
        os.close(fd)


def hold(fd: int, path: Path, wait: buildlock.Wait) -> bool:
    """Take a shared flock on fd (path, open), which keeps prune from deleting the file while the
    descriptor (or a forked copy) is open; False when path no longer names that file (pruned
    meanwhile). Unavailable where the file system has no flock, or when another process keeps an
    exclusive lock on it (only prune takes one, for an instant)."""
    try:
        buildlock.flock(fd, fcntl.LOCK_SH, wait)
        return os.fstat(fd).st_ino == os.lstat(path).st_ino
    except FileNotFoundError:
        return False
    except buildlock.Stalled as e:
        raise Unavailable(f"{path} is locked, {e}") from None
    except OSError as e:
        raise Unavailable(f"{path.parent} has no working file locks ({e.strerror or e})") from None


# ---------------------------------------------------------------------------------------------
# Build and map


@dataclass(frozen=True)
class Decoded:
    """One image as the builder writes it: its bytes (C order), shape, numpy dtype str, original size."""

    data: Any  # anything with the buffer protocol
    shape: tuple[int, ...]
    dtype: str
    hw0: tuple[int, int]


def _widen_thread() -> None:
    # A rank is bound to its share of the CPUs; while it builds, the other ranks wait for the file,
    # so the build uses every CPU the container may use.
    with contextlib.suppress(OSError):
        os.sched_setaffinity(0, topology.container_cpus())  # pid 0: this thread alone


def write(
    path: Path, names: Sequence[str], decode: Callable[[int], Decoded], threads: int, key: str = ""
) -> Index:
    """Decode every image (in `threads` threads, in order) into a new cache file at path, created
    here (never through a link, never over an existing file)."""
    records: list[Record] = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.fchmod(fd, 0o600)  # the dataset's pixels: the user's alone, whatever the umask
    with os.fdopen(fd, "wb") as f, ThreadPool(max(threads, 1), initializer=_widen_thread) as pool:
        f.write(b"\0" * DATA_OFFSET)  # the header goes here last
        offset = DATA_OFFSET
        for im in pool.imap(decode, range(len(names))):
            view = memoryview(im.data).cast("B")
            f.write(view)
            shape = tuple(im.shape) + (1,) * (3 - len(im.shape))
            records.append(Record(offset, view.nbytes, shape, im.dtype, im.hw0))
            offset += view.nbytes
        index = Index(tuple(records), tuple(names), key)
        raw = pack_index(index)
        f.write(raw)
        f.seek(0)
        f.write(pack_header(len(records), offset, len(raw)))
    return index


@dataclass(frozen=True)
class Obtained:
    path: Path
    index: Index
    built: bool  # this process built it (False: it was there, or another process built it)
    seconds: float
    held: int = -1  # the descriptor that holds the file (see hold); open while the file may be mapped


def obtain(
    directory: Path,
    key: str,
    names: Sequence[str],
    decode: Callable[[int], Decoded],
    *,
    estimate: int,
    threads: int,
    environ: Mapping[str, str],
) -> Obtained:
    """The cache file for key, held (see hold): mapped as it is, or built once (see the module's build
    protocol). Raises Unavailable when the location is read-only, full, without file locks, the
    entry is over the budget, or another process holds the build lock without building."""
    wait = buildlock.Wait(
        buildlock.stall_s(environ),
        progress=lambda: buildlock.tmp_bytes(directory, key),
        on_wait=lambda who: _logger.info(
            "waiting for %s: its images are being cached by %s", directory / f"{key}.lock", who
        ),
    )
    for _ in range(3):
        t0 = time.perf_counter()
        got = _mapped(directory / f"{key}{SUFFIX}", names, wait)
        if got is None:
            got = _built(directory, key, names, decode, estimate, threads, environ, wait)
        if got is not None:
            return replace(got, seconds=time.perf_counter() - t0)
    raise Unavailable(
        f"{directory / key}{SUFFIX} was deleted each time it was opened (another node's prune?)"
    )


@dataclass(frozen=True)
class _Found:
    """What is at KEY.img: a usable file (open, held, its index), or why it is not usable."""

    got: Obtained | None = None
    problem: str = ""  # "" with got None: nothing there, or pruned while it was being held


def _look(final: Path, names: Sequence[str], wait: buildlock.Wait, built: bool = False) -> _Found:
    try:
        fd = buildlock.open_own(final)
    except FileNotFoundError:
        return _Found()
    except buildlock.Refused as e:
        return _Found(problem=str(e))
    except OSError as e:
        return _Found(problem=f"cannot be read ({e.strerror or e})")
    try:
        index = _read_index(fd)
        if index is None:
            problem = "is not a finished cache file of this format (cut short, or its index is broken)"
        elif sorted(index.paths) != sorted(names):
            problem = "holds other images than this dataset's"
        elif index.key != final.name.removesuffix(SUFFIX):
            problem = f"was built for other images or settings (key {index.key[:12]}..., renamed or copied)"
        elif hold(fd, final, wait):
            with contextlib.suppress(OSError):
                os.utime(fd)  # its use time, for pruning
            got, fd = Obtained(final, index, built, 0.0, held=fd), -1
            return _Found(got)
        else:
            problem = ""  # pruned between the open and the lock: look again
        return _Found(problem=problem)
    finally:
        if fd >= 0:
            os.close(fd)


def _mapped(final: Path, names: Sequence[str], wait: buildlock.Wait) -> Obtained | None:
    """KEY.img held, when it is there and usable (what is wrong with it is the builder's to say)."""
    return _look(final, names, wait).got


def _built(
    directory: Path,
    key: str,
    names: Sequence[str],
    decode: Callable[[int], Decoded],
    estimate: int,
    threads: int,
    environ: Mapping[str, str],
    wait: buildlock.Wait,
) -> Obtained | None:
    """Under the build lock: the file another process built meanwhile, or one built here (what was
    at KEY.img and unusable is removed, with one WARNING). None: pruned meanwhile, look again."""
    final = directory / f"{key}{SUFFIX}"
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if problem := safefs.distrust(os.lstat(directory), safefs.trust(environ), folder=True):
            raise buildlock.Refused(problem)  # another user's (made first), or one others can write
        lock = buildlock.open_lock(directory / f"{key}.lock")
    except (OSError, buildlock.Refused) as e:
        raise Unavailable(f"{directory} is not usable ({getattr(e, 'strerror', None) or e})") from None
    try:
        try:
            buildlock.flock(lock, fcntl.LOCK_EX, wait)
        except buildlock.Stalled as e:
            raise Unavailable(f"{directory / key}.lock is {e}") from None
        except OSError as e:
            raise Unavailable(f"{directory} has no working file locks ({e.strerror or e})") from None
        found = _look(final, names, wait)  # built by the process that held the lock?
        if found.got is not None:
            return found.got
        if found.problem:
            _replace_unusable(final, found.problem)
        _build(directory, key, names, decode, estimate, threads, environ)
        return _look(final, names, wait, built=True).got
    finally:
        os.close(lock)


def _replace_unusable(final: Path, problem: str) -> None:
    try:
        buildlock.remove(final)
    except OSError as e:
        why = e.strerror or e
        raise Unavailable(f"{final} {problem}, and cannot be removed ({why}): remove it") from None
    _logger.warning("%s %s: not used; the images are cached again", final, problem)


def _build(
    directory: Path,
    key: str,
    names: Sequence[str],
    decode: Callable[[int], Decoded],
    estimate: int,
    threads: int,
    environ: Mapping[str, str],
) -> None:
    for old in directory.glob(f"{key}.*.tmp"):  # a build killed half-way; we hold its lock
        with contextlib.suppress(OSError):
            buildlock.remove(old)
    prune(directory, environ, incoming=estimate)
    fs = os.statvfs(directory)
    free = fs.f_bavail * fs.f_frsize
    budget = max_bytes(environ, fs.f_blocks * fs.f_frsize)
    if estimate > budget:
        raise Unavailable(
            f"the images need {estimate / GIB:.1f} GiB, over the cache budget of {budget / GIB:.1f} GiB "
            f"in {directory} (RIG_CACHE_MAX_GB)"
        )
    if estimate + FREE_RESERVE > free:
        need, have = estimate / GIB, free / GIB
        raise Unavailable(f"the images need {need:.1f} GiB, {directory} has {have:.1f} GiB free")
    tmp = directory / f"{key}.{os.getpid()}.tmp"
    try:
        write(tmp, names, decode, threads, key)
        os.replace(tmp, directory / f"{key}{SUFFIX}")
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EEXIST):
            raise Unavailable(f"writing to {directory} failed ({e.strerror})") from None
        raise
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


class Images:
    """A dataset's images, in the dataset's order, as views into the mapped file.

    Copy-on-write (MAP_PRIVATE): pages are the page cache's, shared by every process; an in-place
    change by an augmentation would stay in that process, as with Ultralytics' own buffer. Fork
    workers inherit the mapping; pickling (spawn workers) sends the path and reopens it."""

    def __init__(self, path: Path, index: Index, order: Sequence[str], held: int = -1) -> None:
        position = {p: i for i, p in enumerate(index.paths)}
        self.path = path
        self.held = held  # the descriptor holding the file against prune (closed at exit)
        self.records = [index.records[position[p]] for p in order]
        self._map: Any = None

    def _buffer(self) -> Any:
        if self._map is None:
            np = __import__("numpy")
            # The file that was checked (its descriptor, inherited by fork workers); a spawned worker
            # opens the path again, with the same checks.
            fd = self.held if self.held >= 0 else buildlock.open_own(self.path)
            try:
                with open(fd, "rb", closefd=False) as f:
                    self._map = np.memmap(f, dtype="uint8", mode="c")
            finally:
                if fd != self.held:
                    os.close(fd)
        return self._map

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int) -> Any:
        r = self.records[i]
        return self._buffer()[r.offset : r.offset + r.nbytes].view(r.dtype).reshape(r.shape)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_map": None, "held": -1}

    @property
    def hw0(self) -> list[tuple[int, int]]:
        return [r.hw0 for r in self.records]

    @property
    def hw(self) -> list[tuple[int, int]]:
        return [r.hw for r in self.records]


# ---------------------------------------------------------------------------------------------
# Residency: how much of a file the page cache holds (rig doctor, rig bench)

_PROT_READ, _MAP_SHARED = 0x1, 0x01


def resident_bytes(path: Path) -> int:
    """Bytes of the file in the page cache (mincore(2) over a fresh mapping); 0 when unknown."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    size_t, c_int = ctypes.c_size_t, ctypes.c_int
    libc.mmap.argtypes = [ctypes.c_void_p, size_t, c_int, c_int, c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return 0
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return 0
        size = os.fstat(fd).st_size
        if size == 0:
            return 0
        addr = libc.mmap(None, size, _PROT_READ, _MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            return 0
        try:
            pages = -(-size // mmap.PAGESIZE)
            vec = (ctypes.c_ubyte * pages)()
            if libc.mincore(addr, size, vec) != 0:
                return 0
            return min(sum(b & 1 for b in vec) * mmap.PAGESIZE, size)
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)
