"""The users' jobs when the workstation stops: which processes get SIGTERM, which are waited for.

A training job started over SSH or in a Jupyter terminal must get the SIGTERM `docker stop` sends
(it then finishes its batch and writes `last.pt`), not the SIGKILL that ends the container. The
candidates are the processes of user yolo outside the services' own sessions: SSH sessions'
processes, Jupyter terminals and kernels. Discovery reads /proc through a parameter; the two
decisions below are pure.

TERM goes to the top of each job's process tree (and to what a script runs), as a terminal's
Ctrl-C would reach the job and not its helpers: a PyTorch DataLoader worker that gets SIGTERM from
anyone but its parent dies and takes the training down with "DataLoader worker is killed by
signal: Terminated"; torchrun forwards the signal to its ranks itself. A child whose parent exits is
reparented to PID 1 and becomes a top on the next look, so an orphan is never missed. Later looks
follow only the processes of the first one and what they start: a kernel Jupyter restarts meanwhile
is not a job to wait for.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rig import log

# Programs that carry a session rather than do work. An interactive shell ignores SIGTERM and would
# sit idle for ever; sshd's per-login process, tmux and screen hang up their terminal on SIGTERM,
# which kills the job inside with SIGHUP before it can save. They get no TERM, nobody waits for them.
# A shell that runs a script or a command (`bash job.sh`, `bash -c '...'`, under setsid or nohup too)
# is a job like any other: it gets TERM (its trap runs) and its grace, and so do its children.
SHELLS = frozenset({"bash", "sh", "dash", "zsh", "fish", "ksh", "mksh", "tcsh", "csh"})
CARRIERS = frozenset({"sshd", "sshd-session", "tmux", "screen", "SCREEN", "mosh-server", "dtach"})
# Shell options followed by a value (`bash -o pipefail script.sh`), not by the script.
_SHELL_OPTION_VALUES = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    sid: int  # session id: a service's own processes share its session
    uid: int  # real uid
    # The kernel's name for it (15 bytes): the executable's, or a rename (pt_main_thread); any bytes a
    # user chose, escaped for the log (rig.log.printable).
    comm: str
    start: int = 0  # start time in clock ticks: (pid, start) names a process even if its pid is reused
    argv: tuple[str, ...] = ()  # its command line (empty: unknown, or a kernel thread)


def parse_stat(pid: int, stat: bytes, status: bytes, cmdline: bytes = b"") -> Proc | None:
    """One process from its /proc files, as bytes (a name needs not be UTF-8); None for a zombie.
    ValueError when the files are not what the kernel writes."""
    # "pid (comm) state ppid pgrp session ...": comm may hold spaces, parentheses, any byte.
    comm = stat[stat.index(b"(") + 1 : stat.rindex(b")")]
    fields = stat[stat.rindex(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):
        return None
    uid = next((line.split()[1] for line in status.splitlines() if line.startswith(b"Uid:")), None)
    if uid is None:
        raise ValueError(f"no Uid line in /proc/{pid}/status")
    argv = tuple(log.printable(a) for a in cmdline.split(b"\0")[:-1]) if cmdline.endswith(b"\0") else ()
    return Proc(pid, int(fields[1]), int(fields[3]), int(uid), log.printable(comm), int(fields[19]), argv)


def read_proc(proc_root: Path = Path("/proc")) -> list[Proc]:
    """Every live process, from /proc/<pid>/stat, status and cmdline; zombies, vanished processes and
    files the kernel did not write are skipped."""
    procs = []
    for entry in proc_root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
            status = (entry / "status").read_bytes()
        except OSError:  # exited while we looked
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            cmdline = b""
        try:
            proc = parse_stat(int(entry.name), stat, status, cmdline)
        except (ValueError, IndexError):
            continue
        if proc is not None:
            procs.append(proc)
    return procs


def interactive_shell(argv: Sequence[str]) -> bool:
    """Whether a shell's command line runs no script and no -c command: it reads a terminal (or
    stdin). Unknown (empty) counts as interactive."""
    if not argv or argv[0].startswith("-"):  # `-bash`: a login shell
        return True
    args = iter(argv[1:])
    for arg in args:
        if arg == "--" or not arg.startswith(("-", "+")):
            return False  # a script follows (or this is it)
        if arg in _SHELL_OPTION_VALUES:
            next(args, None)
        elif not arg.startswith("--") and "c" in arg[1:]:
            return False  # -c 'command' (or -ec, -lc...)
    return True


def wait_for(proc: Proc) -> tuple[bool, str]:
    """Whether stopping waits for this process to exit after TERM, and why."""
    if proc.comm in SHELLS and interactive_shell(proc.argv):
        return False, "an interactive shell: it ignores SIGTERM; the jobs it started are waited for"
    if proc.comm in CARRIERS:
        return False, "carries a session (SSH login, tmux, screen): TERM would hang up the jobs inside"
    return True, "a job: it gets time to save its work"


Key = tuple[int, int]  # (pid, start)


@dataclass(frozen=True)
class Plan:
    term: tuple[Proc, ...]  # the tops of the jobs' trees: each gets SIGTERM once
    wait: tuple[Proc, ...]  # everything stopping waits for (the tops and their helpers)
    known: frozenset[Key]  # the session processes so far: pass it to the next look


def plan(
    procs: Iterable[Proc],
    uid: int,
    service_sids: Collection[int],
    exclude: Collection[int],
    known: frozenset[Key] | None = None,
) -> Plan:
    """The session processes among `procs`: user `uid`'s, outside the services' sessions and
    `exclude` (the supervisor); TERM to each job whose parent is not itself a job.

    `known` (None at the first look): the session processes seen before. Later looks only follow
    them and what they start: a kernel that Jupyter restarts during the stop, or a login that
    begins then, is no job of the users' sessions to wait for.
    """
    mine = {
        p.pid: p
        for p in procs
        if p.uid == uid and p.sid not in service_sids and p.pid not in exclude and p.pid != 1
    }
    if known is not None:
        kept = {pid: p for pid, p in mine.items() if (p.pid, p.start) in known}
        while added := {pid: p for pid, p in mine.items() if pid not in kept and p.ppid in kept}:
            kept |= added
        mine = kept
    jobs = {pid: p for pid, p in mine.items() if wait_for(p)[0]}
    # A job's helpers (DataLoader workers, torchrun's ranks) are left to it; a script's commands are not.
    term = tuple(p for p in jobs.values() if p.ppid not in jobs or jobs[p.ppid].comm in SHELLS)
    return Plan(term, tuple(jobs.values()), frozenset((p.pid, p.start) for p in mine.values()))


def describe(procs: Sequence[Proc], limit: int = 5) -> str:
    """'123 python, 456 rig' and how many more: for one log line."""
    shown = ", ".join(f"{p.pid} {p.comm}" for p in procs[:limit])
    return shown + (f" and {len(procs) - limit} more" if len(procs) > limit else "")
