"""The run directory a launch trains in: one per job, the same on every node, found again on a restart.

Ultralytics names runs train, train-2, train-3... (its increment_path with sep "-"). A launch takes
the first free name by renaming a hidden folder that already holds its owner file (`.rig-owner`:
the job's identity, rig.launch.nodes.job_identity) onto it: the folder appears with its owner, at
once, so two launches never get one folder, and the nodes of one job, each running `rig train`,
end in the same one without talking: a node that finds its own job's folder takes it. A requeued job
finds its own again (resume=auto continues it); another job with the same name= gets the next,
unless resume=auto found the folder's owner no longer running (rig.launch.slurmjobs): then the
first job to mark the hand-over takes it over (`_take`), its owner file rewritten. A launch outside
a scheduler has an owner of its own, so it always gets a new folder.

`scan` reads what is there, `choose` decides (pure), `claim` is the one step that writes.

Another user may share the project folder (a cluster's runs folder): a folder is the job's own only
when its owner file says so and both pass rig.safefs's one trust rule (the user's or root's, no one
else able to write them but RIG_SHARE_GROUP's group); a folder or checkpoint that does not pass is
never read or written, and one that the request names (exist_ok=True, resume=auto, resume=True) is
one ERROR line naming it and its owner. The project folder and a checkpoint are checked with every
folder above them, from `/` (rig.safefs.open_trusted).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
import socket
import stat
import unicodedata
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from rig import safefs
from rig.errors import RigError

OWNER_FILE = ".rig-owner"
MAX_OWNER_BYTES = 4096
MAX_NAME = 200  # characters of name=: room for Ultralytics' -N and rig's hidden temporary names
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# What name= may not hold: Unicode's controls (C0, DEL, C1), format characters (bidirectional
# overrides such as U+202E, zero widths), line and paragraph separators; surrogates (bytes that are
# not UTF-8) are no text either.
_NOT_IN_NAMES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


@dataclass(frozen=True)
class Existing:
    path: Path
    owner: str | None  # None: no owner file (a folder of Ultralytics' own, an older rig's or a user's)
    problem: str | None = None  # why the folder is not one to trust (another user's, a link...)


@dataclass(frozen=True)
class Choice:
    path: Path
    owned: bool  # the job's own folder, there already: nothing to claim
    take_from: str | None = None  # the owner, no longer running, whose folder the job takes over


def check_name(name: str) -> str:
    """name= as one folder name: no '/', no control, format or line-separator character, of sane length."""
    how = "give name= a plain folder name (letters, digits, '-', '_', '.')"
    if not name or name in {".", ".."} or "/" in name or "\0" in name:
        raise RigError(f"is not one folder name; {how}", option="name", value=name)
    if any(unicodedata.category(c) in _NOT_IN_NAMES for c in name):
        # Escaped: a line break or a direction override in it must not reach the terminal.
        shown = name.encode("unicode_escape", errors="backslashreplace").decode("ascii")
        raise RigError(f"holds control or format characters; {how}", option="name", value=shown)
    if len(name) > MAX_NAME or len(name.encode()) > MAX_NAME:
        raise RigError(f"is longer than {MAX_NAME} characters; {how}", option="name", value=name[:40] + "...")
    return name


def share_gid(environ: Mapping[str, str]) -> int | None:
    """RIG_SHARE_GROUP's group id (rig.safefs.share_gid); None: run folders stay private."""
    return safefs.share_gid(environ)


def folder_mode(environ: Mapping[str, str] | None = None) -> int:
    """A run folder's mode: 0700, or 2750 (readable by RIG_SHARE_GROUP, new files in its group)."""
    return 0o2750 if share_gid(os.environ if environ is None else environ) is not None else 0o700


def file_mode(environ: Mapping[str, str] | None = None) -> int:
    """A checkpoint's (and owner file's) mode: 0600, or 0640 with RIG_SHARE_GROUP."""
    return 0o640 if share_gid(os.environ if environ is None else environ) is not None else 0o600


def _trust(uid: int | None) -> safefs.Trust:
    """The running user's trust (RIG_SHARE_GROUP), or, for tests, another uid's."""
    return safefs.trust(os.environ, uid)


def _problem(st: os.stat_result, who: safefs.Trust, *, folder: bool) -> str | None:
    """rig.safefs's trust rule, and for a run folder of the user's: one it can list and enter."""
    if problem := safefs.distrust(st, who, folder=folder):
        return problem
    if folder and st.st_uid == who.uid and st.st_mode & 0o700 != 0o700:
        return f"cannot be listed and entered by you (mode {stat.S_IMODE(st.st_mode):04o}); chmod u+rwx it"
    return None


def _distrusted(path: Path, problem: str) -> RigError:
    return RigError(
        f"{path} {problem}: rig uses only run folders and checkpoints of your own that no one else "
        "can write; move it away or give another project= or name="
    )


def _not_the_users(
    project: Path, e: safefs.Untrusted, doing: str = "writes into", uid: int | None = None
) -> RigError:
    where = f"project folder {e}" if e.path == project else f"project folder {project}: {e}"
    # Root in the container (`docker exec`) meets the user's /workspace: the way in is as that user.
    as_root = (os.geteuid() if uid is None else uid) == 0
    also = "; as root, run it as that user instead (docker compose exec -u yolo ...)" if as_root else ""
    return RigError(
        f"{where}: rig never {doing} a folder another user controls; give project= a folder of your own{also}"
    )


def _unreadable(project: Path, e: OSError) -> RigError:
    return RigError(f"project folder {project} cannot be read ({e.strerror or e}); give project= another")


def check_project(project: Path, uid: int | None = None) -> None:
    """A project folder rig may write into: it and every folder above it pass rig.safefs's trust rule
    (the user's or root's; writable by no one else unless sticky, or by RIG_SHARE_GROUP's group), so
    nobody else can rename a run away or put another in its place. Not there yet: the folders above
    it are checked (claim makes the rest)."""
    try:
        os.close(safefs.open_trusted(project, _trust(uid), folder=True))
    except FileNotFoundError:
        return
    except safefs.Untrusted as e:
        raise _not_the_users(project, e, uid=uid) from None
    except OSError as e:
        raise _unreadable(project, e) from None


@contextlib.contextmanager
def _opened(path: Path, dir_fd: int | None = None, name: str | None = None) -> Iterator[int]:
    fd = os.open(name if name is not None else path, _OPEN_DIR, dir_fd=dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def _owner_of(folder: int, path: Path, who: safefs.Trust) -> tuple[str | None, str | None]:
    """The owner file of an open, trusted run folder: (its identity, None) or (None, why not trusted)."""
    return _read_owner(folder, path, OWNER_FILE, who)


def _read_owner(folder: int, path: Path, name: str, who: safefs.Trust) -> tuple[str | None, str | None]:
    try:
        fd = os.open(name, _OPEN_FILE, dir_fd=folder)
    except FileNotFoundError:
        return None, None
    except OSError:
        return None, f"{path / name} is {safefs.describe(name, folder)}, not a regular file"
    try:
        problem = _problem(os.fstat(fd), who, folder=False)
        if problem:
            return None, f"{path / name} {problem}"
        text = os.read(fd, MAX_OWNER_BYTES).decode(errors="replace").strip()
    finally:
        os.close(fd)
    return text or None, None


def _inspect(project_fd: int, path: Path, who: safefs.Trust) -> Existing | None:
    """The entry at path (a name in the open project folder), never followed; None: nothing there."""
    try:
        st = os.stat(path.name, dir_fd=project_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    problem = _problem(st, who, folder=True)
    if problem:
        return Existing(path, None, f"{path} {problem}")
    try:
        with _opened(path, project_fd, path.name) as fd:
            if (st2 := os.fstat(fd)).st_ino != st.st_ino or (problem := _problem(st2, who, folder=True)):
                return Existing(path, None, f"{path} {problem or 'changed while it was read'}")
            owner, problem = _owner_of(fd, path, who)
    except OSError as e:
        return Existing(path, None, f"{path} cannot be opened ({e.strerror or e})")
    return Existing(path, owner, problem)


def scan(project: Path, name: str, uid: int | None = None) -> list[Existing]:
    """The run's existing folders in Ultralytics' order, with their owners, each looked at without
    following a link; another user's (or a link, a file) is there, never trusted."""
    who = _trust(uid)
    try:
        project_fd = safefs.open_trusted(project, who, folder=True)
    except FileNotFoundError:
        return []
    except safefs.Untrusted as e:
        raise _not_the_users(project, e, "reads run folders from", uid=uid) from None
    except OSError as e:
        raise _unreadable(project, e) from None
    out: list[Existing] = []
    try:
        n = 1
        while (found := _inspect(project_fd, project / (name if n == 1 else f"{name}-{n}"), who)) is not None:
            out.append(found)
            n += 1
    finally:
        os.close(project_fd)
    return out


def read_owner(path: Path, uid: int | None = None) -> str | None:
    """The owner file's identity of the run folder at path; None without one, or when the folder or
    the file is not the running user's alone."""
    found = scan(path.parent, path.name, uid)
    return found[0].owner if found and found[0].problem is None else None


def owns(existing: Existing, identity: str | None) -> bool:
    """Whether the job `identity` owns the folder: its owner file says so, and both are the running
    user's alone. A folder without an owner file is never adopted (another user can name one for any
    job: Slurm's job ids are sequential)."""
    return identity is not None and existing.problem is None and existing.owner == identity


def choose(
    project: Path, name: str, existing: list[Existing], identity: str | None, takeable: Collection[str] = ()
) -> Choice:
    """The job's own folder if it has one; else the first whose owner is takeable (resume=auto of a
    job submitted again: owners that no longer run, rig.launch.slurmjobs), to take over; else the
    first free name (to claim)."""
    own = next((e for e in existing if owns(e, identity)), None)
    if own is not None:
        return Choice(own.path, owned=True)
    if identity is not None:
        taken = next((e for e in existing if e.problem is None and e.owner and e.owner in takeable), None)
        if taken is not None:
            return Choice(taken.path, owned=False, take_from=taken.owner)
    return Choice(project / (name if not existing else f"{name}-{len(existing) + 1}"), owned=False)


def check_run_dir(path: Path, uid: int | None = None) -> None:
    """A run folder used as it is (exist_ok=True, resume=auto outside a job): nothing there, or the
    user's own folder (its `weights` too), that no one else can write; else one line."""
    found = scan(path.parent, path.name, uid)[:1]
    if found and found[0].problem:
        raise _distrusted(path, found[0].problem.removeprefix(f"{path} "))
    if found:
        fd = open_checkpoint(path, uid, None)
        if fd is not None:
            os.close(fd)


def open_checkpoint(run_dir: Path, uid: int | None = None, name: str | None = "last.pt") -> int | None:
    """A descriptor of run_dir/weights/NAME, opened from `/` without following a link, every step
    passing the trust rule (rig.safefs.open_trusted) and the run folder and weights/ the user's to
    enter; None when it is not there. name None: only the folders checked. A step that does not
    pass: one line naming it and its owner."""
    who = _trust(uid)
    steps = [(run_dir, True), (run_dir / "weights", True)]
    if name is not None:
        steps.append((run_dir / "weights" / name, False))
    fd = None
    for path, folder in steps:
        if fd is not None:
            os.close(fd)
            fd = None
        try:
            fd = safefs.open_trusted(path, who, folder=folder)
        except FileNotFoundError:
            return None
        except safefs.Untrusted as e:
            raise _distrusted(e.path, e.problem) from None
        except OSError as e:
            raise _distrusted(path, f"cannot be opened ({e.strerror or e})") from None
        if problem := _problem(os.fstat(fd), who, folder=folder):
            os.close(fd)
            raise _distrusted(path, problem)
    if name is None and fd is not None:
        os.close(fd)
        return None
    return fd


def checkpoint_problem(path: Path, uid: int | None = None) -> str | None:
    """Why the checkpoint at path is not one to load: it, or a folder above it, is a link, another
    user's, or writable by others (rig.safefs's trust rule); None: fine."""
    try:
        os.close(safefs.open_trusted(path, _trust(uid)))
    except safefs.Untrusted as e:
        return str(e)
    except OSError as e:
        return f"{path} cannot be read ({e.strerror or e})"
    return None


def own_checkpoints(runs_dir: Path, pattern: str = "last*.pt", uid: int | None = None) -> Iterator[Path]:
    """The checkpoints under runs_dir that pass checkpoint_problem: the user's own runs, links never
    followed (resume=True without model=)."""
    uid = os.geteuid() if uid is None else uid
    for folder, _dirs, files in os.walk(runs_dir, followlinks=False):
        for f in files:
            path = Path(folder) / f
            if path.match(pattern) and checkpoint_problem(path, uid) is None:
                yield path


def default_name(job: str | None) -> str:
    """train, or under a scheduler train-<job> (the same across the job's restarts: resume=auto)."""
    return f"train-{job}" if job else "train"


def launch_owner() -> str:
    """An owner no other launch has: for a launch outside any job."""
    return f"launch-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"


def _create(path: Path, owner: str, environ: Mapping[str, str]) -> bool:
    """path made with its owner file inside, at once (rename of a hidden, complete folder); False
    when the name is taken. Private (0700) unless RIG_SHARE_GROUP shares it."""
    tmp = path.parent / f".{path.name}.rig-{secrets.token_hex(6)}"
    tmp.mkdir(mode=0o700)
    try:
        gid = share_gid(environ)
        with _opened(tmp) as dfd:
            if gid is not None:
                os.fchown(dfd, -1, gid)
            os.fchmod(dfd, folder_mode(environ))
            safefs.write_atomic(OWNER_FILE, (owner + "\n").encode(), dfd, file_mode(environ))
            _make_weights(dfd, environ)
        # rename(2) replaces an empty folder: never one that is there (a user's empty `train`).
        if path.exists() or path.is_symlink():
            return False
        try:
            tmp.rename(path)
        except OSError as e:
            if path.exists() or path.is_symlink():
                return False
            raise e
        return True
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _take(path: Path, old: str, owner: str, environ: Mapping[str, str]) -> bool:
    """The folder of `old` (a job that no longer runs) made `owner`'s: the first job to link its
    name at the hand-over's marker (one per previous owner: link(2) never replaces) takes it, and
    every node of that job agrees; another job gets False. The folder is walked as scan trusts it."""
    marker = f".rig-taken-{hashlib.sha256(old.encode()).hexdigest()[:16]}"
    who = safefs.trust(environ)
    with _opened(path.parent) as pfd, _opened(path, pfd, path.name) as dfd:
        if problem := _problem(os.fstat(dfd), who, folder=True):
            raise _distrusted(path, problem)
        mine = f".rig-take-{secrets.token_hex(6)}"
        safefs.write_atomic(mine, (owner + "\n").encode(), dfd, file_mode(environ))
        try:
            with contextlib.suppress(FileExistsError):
                os.link(mine, marker, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
        finally:
            os.unlink(mine, dir_fd=dfd)
        winner, problem = _read_owner(dfd, path, marker, who)
        if problem or winner != owner:
            return False
        current, problem = _owner_of(dfd, path, who)
        if problem or current not in {old, owner}:
            return False
        safefs.write_atomic(OWNER_FILE, (owner + "\n").encode(), dfd, file_mode(environ))
        return True


def _make_weights(run_fd: int, environ: Mapping[str, str]) -> None:
    """weights/ made by rig with the run folder's mode: Ultralytics' own mkdir follows the umask (a
    group-writable folder under umask 002, where the group could swap a checkpoint)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir("weights", 0o700, dir_fd=run_fd)
        with _opened(Path("weights"), run_fd, "weights") as wfd:
            os.fchmod(wfd, folder_mode(environ))


def make_run_dir(path: Path, environ: Mapping[str, str] | None = None) -> None:
    """A run folder used as it is (checked by check_run_dir), made when missing as claim makes one
    (private, or RIG_SHARE_GROUP's), its weights/ too; nothing of what is there changed."""
    env = os.environ if environ is None else environ
    make_project(path.parent, env)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
        gid = share_gid(env)
        with _opened(path) as dfd:
            if gid is not None:
                os.fchown(dfd, -1, gid)
            os.fchmod(dfd, folder_mode(env))
    check_run_dir(path)
    with _opened(path) as dfd:
        _make_weights(dfd, env)


def make_project(project: Path, environ: Mapping[str, str]) -> None:
    """The project folder made where missing, each folder in its checked parent (never writable by
    others whatever the umask), and every step from `/` checked as check_project does."""
    try:
        os.close(safefs.open_trusted(project, safefs.trust(environ), folder=True, create_mode=0o755))
    except safefs.Untrusted as e:
        raise _not_the_users(project, e) from None


def claim(
    project: Path,
    name: str,
    identity: str | None,
    environ: Mapping[str, str] | None = None,
    takeable: Collection[str] = (),
) -> Path:
    """The job's folder: its own if a node (or its run before a requeue) made it, else one whose
    owner is takeable (taken over: _take), else the first free name, made with the job's owner file
    (a launch outside any job: an owner of its own)."""
    env = os.environ if environ is None else environ
    owner = identity or launch_owner()
    path = project / name
    try:
        make_project(project, env)
        while True:
            choice = choose(project, name, scan(project, name), identity, takeable)
            path = choice.path
            if choice.take_from is not None:
                if _take(path, choice.take_from, owner, env):
                    return path
                # Another job took it first: its new owner is not takeable, the next scan moves on.
                takeable = [t for t in takeable if t != choice.take_from]
                continue
            # Taken meanwhile (a peer node of the job, another launch): the next scan sees it.
            if choice.owned or _create(path, owner, env):
                return path
    except OSError as e:
        raise RigError(
            f"cannot create the run directory {path} ({e.strerror or e}); give project= a writable folder"
        ) from None
