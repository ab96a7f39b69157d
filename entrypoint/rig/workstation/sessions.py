"""The users' jobs when the workstation stops: which processes get SIGTERM, which are waited for.

A training job started over SSH or in a Jupyter terminal must get the SIGTERM `docker stop` sends
(it then finishes its batch and writes `last.pt`), not the SIGKILL that ends the container. The
candidates are the processes of user yolo outside the services' own sessions: SSH sessions'
processes, Jupyter terminals and kernels. Discovery reads /proc through a parameter; the two
decisions below are pure.

TERM goes to the top of each job's process tree only, as a terminal's Ctrl-C would reach the job
and not its helpers: a PyTorch DataLoader worker that gets SIGTERM from anyone but its parent dies
and takes the training down with "DataLoader worker is killed by signal: Terminated"; torchrun
forwards the signal to its ranks itself. A child whose parent exits is reparented to PID 1 and
becomes a top on the next look, so an orphan is never missed. Later looks follow only the processes
of the first one and what they start: a kernel Jupyter restarts meanwhile is not a job to wait for.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

# Programs that carry a session rather than do work. Interactive shells ignore SIGTERM and would
# sit idle for ever; sshd's per-login process, tmux and screen hang up their terminal on SIGTERM,
# which kills the job inside with SIGHUP before it can save. They get no TERM, nobody waits for them.
SHELLS = frozenset({"bash", "sh", "dash", "zsh", "fish", "ksh", "mksh", "tcsh", "csh"})
CARRIERS = frozenset({"sshd", "sshd-session", "tmux", "screen", "SCREEN", "mosh-server", "dtach"})


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    sid: int  # session id: a service's own processes share its session
    uid: int  # real uid
    comm: str  # the kernel's name for it (15 characters): the executable's, or a rename (pt_main_thread)
    start: int = 0  # start time in clock ticks: (pid, start) names a process even if its pid is reused


def read_proc(proc_root: Path = Path("/proc")) -> list[Proc]:
    """Every live process, from /proc/<pid>/stat and status; zombies and vanished ones are skipped."""
    procs = []
    for entry in proc_root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            status = (entry / "status").read_text()
        except OSError:  # exited while we looked
            continue
        # "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses.
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] in ("Z", "X"):
            continue
        uid = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("Uid:"))
        procs.append(Proc(int(entry.name), int(fields[1]), int(fields[3]), uid, comm, int(fields[19])))
    return procs


def wait_for(proc: Proc) -> tuple[bool, str]:
    """Whether stopping waits for this process to exit after TERM, and why."""
    if proc.comm in SHELLS:
        return False, "a shell: an interactive one ignores SIGTERM; the jobs it started are waited for"
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
    term = tuple(p for p in jobs.values() if p.ppid not in jobs)
    return Plan(term, tuple(jobs.values()), frozenset((p.pid, p.start) for p in mine.values()))


def describe(procs: Sequence[Proc], limit: int = 5) -> str:
    """'123 python, 456 rig' and how many more: for one log line."""
    shown = ", ".join(f"{p.pid} {p.comm}" for p in procs[:limit])
    return shown + (f" and {len(procs) - limit} more" if len(procs) > limit else "")
