"""A small process supervisor: start services, restart a crashed one (bounded, with backoff), stop all.

Vocabulary from supervisord (STARTING, RUNNING, BACKOFF, FATAL). A FATAL service stops everything
with exit code 1: a workstation without SSH is worth less than a restarted one, and the container's
restart policy does the restart. Stopping first gives the users' jobs SIGTERM and a grace period
(rig.workstation.sessions), then stops the services as gunicorn does it: TERM, a deadline, KILL, reap. Signal
handlers only put the signal on a queue (`queue.SimpleQueue.put` is reentrant, safe in a handler);
the loop acts on it, and tests inject into the same queue instead of sending real signals. The
transitions are pure functions below.

A service's port is its own. A service the supervisor holds the port for (spec.listen) gets the
listening socket at every start and says on a pipe when it serves (rig.workstation.handover): no
other process can take that port. One that binds its own port (sshd) is RUNNING only once every
socket listening there is one it holds (`probe`: socket inodes to its pid, rig.workstation.listening);
while another process holds the port, it is never RUNNING (it fails to start and is restarted with
backoff, or stays STARTING until its start times out), and the healthcheck says unhealthy.
services.json names the listening sockets' inodes, for `rig health` to check that the listener is
still the service's.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import queue
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType

from rig import log, safefs
from rig.workstation import handover, servicelog, sessions, tokengate
from rig.workstation.listening import held_by
from rig.workstation.spec import ServiceSpec

_logger = log.get("serve")
TICK = 0.2
# How long the sessions' jobs get to exit after TERM, before the services stop (rig serve reads it).
SESSION_GRACE_ENV = "RIG_SESSION_GRACE"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class State(enum.Enum):
    STARTING = "starting"  # spawned, not yet serving on its own port
    RUNNING = "running"
    BACKOFF = "backoff"  # exited; waits `retry_at` before the next start
    FATAL = "fatal"  # failed too often in a row; left alone until the container restarts
    STOPPED = "stopped"


@dataclass(frozen=True)
class Policy:
    max_failures: int = 5  # consecutive failures before FATAL
    backoff_base: float = 1.0  # first retry after 1 s, then 2, 4, 8... up to backoff_cap
    backoff_cap: float = 30.0
    stable_after: float = 60.0  # this long RUNNING and the failure count starts over
    start_timeout: float = 120.0  # STARTING this long without answering counts as a failure
    session_grace: float = 90.0  # the users' jobs: TERM, then this long to save and exit
    stop_timeout: float = 10.0  # the services: TERM, then KILL after this


@dataclass(frozen=True)
class Status:
    state: State
    since: float
    failures: int = 0
    retry_at: float = 0.0


def after_exit(
    status: Status,
    now: float,
    policy: Policy,
    users_own: bool = False,
    killed: bool = False,
    refused: bool = False,
) -> Status:
    """BACKOFF with a growing delay, or FATAL once the service has failed too often in a row.

    users_own: the service runs as the sessions' user, who may kill it (and every restart) at will.
    Such an exit (`killed`: by a signal the supervisor did not send), or any exit after it answered,
    counts no failure: no user's kills can spend the restart budget and restart the whole
    workstation (every session dropped). Failing to start by itself still counts. A start whose
    secret was refused (`refused`: a session traced or stopped it, rig.workstation.tokengate) is the
    session's act as well: it counts no failure either.
    """
    if refused:
        return Status(State.BACKOFF, now, status.failures, now + policy.backoff_base)
    if users_own and (killed or status.state is State.RUNNING):
        failures = 0 if status.state is State.RUNNING else status.failures
        return Status(State.BACKOFF, now, failures, now + policy.backoff_base)
    stable = status.state is State.RUNNING and now - status.since >= policy.stable_after
    failures = (0 if stable else status.failures) + 1
    if failures >= policy.max_failures:
        return Status(State.FATAL, now, failures)
    delay = min(policy.backoff_cap, policy.backoff_base * 2 ** (failures - 1))
    return Status(State.BACKOFF, now, failures, now + delay)


def spawn(
    spec: ServiceSpec,
    env: Mapping[str, str] | None = None,
    pass_fds: tuple[int, ...] = (),
    on_refused: Callable[[int, str], None] | None = None,
) -> subprocess.Popen[bytes]:
    """Start a service in its own process group (so TERM/KILL reach its children too); `env` and
    `pass_fds`: what rig.workstation.handover hands it, if anything. on_refused(pid, why): a guarded
    start whose secret the gate refused (a session traced or stopped it)."""
    spec = replace(spec, env={**spec.env, **(env or {})}) if env else spec
    if spec.stdin is None:
        return _popen(spec, subprocess.DEVNULL, pass_fds)
    secret = spec.stdin()  # at every start: a secret can be new at each
    if spec.stdin_guarded:
        return _spawn_guarded(spec, secret, pass_fds, on_refused)
    # A pipe holds far more than a secret, so it is written in full before the service reads it. Its
    # inode is root's (0600): another process of the service's user cannot reopen it through /proc.
    read_end, write_end = os.pipe()
    try:
        try:
            os.write(write_end, secret)
        finally:
            os.close(write_end)
        return _popen(spec, read_end, pass_fds)
    finally:
        os.close(read_end)


def _spawn_guarded(
    spec: ServiceSpec,
    secret: bytes,
    pass_fds: tuple[int, ...],
    on_refused: Callable[[int, str], None] | None = None,
) -> subprocess.Popen[bytes]:
    """The service started with one end of a socket pair as stdin; the secret follows on the other
    once the server asks and tokengate allows."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        proc = _popen(spec, theirs.fileno(), pass_fds)
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()

    def feed() -> None:
        uid = spec.ids.uid if spec.ids else os.geteuid()
        got = tokengate.hand(proc.pid, spec.argv, uid, secret, ours)
        if got.given:
            return
        if got.refused:
            log.get(spec.name).warning(
                "not given its token (%s): a session's doing, not the service failing; started again",
                got.why,
            )
            if on_refused is not None:
                on_refused(proc.pid, got.why)
        else:
            log.get(spec.name).warning("not given its token (%s): started again", got.why)

    threading.Thread(target=feed, name=f"{spec.name}-token", daemon=True).start()
    return proc


def _popen(spec: ServiceSpec, stdin: int, pass_fds: tuple[int, ...] = ()) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        list(spec.argv),
        env=dict(spec.env) or None,
        cwd=spec.cwd,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        pass_fds=pass_fds,
        user=spec.ids.uid if spec.ids else None,
        group=spec.ids.gid if spec.ids else None,
        extra_groups=[] if spec.ids else None,
    )


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def install_signal_handlers(events: queue.SimpleQueue[int]) -> None:
    """Handlers only queue the signal; SIGCHLD just wakes the loop early."""

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        events.put(signum)

    for sig in (*STOP_SIGNALS, signal.SIGCHLD):
        signal.signal(sig, on_signal)


class Supervisor:
    def __init__(
        self,
        specs: Sequence[ServiceSpec],
        *,
        events: queue.SimpleQueue[int] | None = None,
        policy: Policy = Policy(),
        state_file: Path | None = None,
        probe: Callable[[int, int], tuple[int, ...]] = held_by,
        clock: Callable[[], float] = time.monotonic,
        session_uid: int | None = None,
        read_procs: Callable[[], Sequence[sessions.Proc]] = sessions.read_proc,
    ) -> None:
        """`session_uid`: whose sessions' jobs to stop first, found by `read_procs` (None: no one).
        `probe(port, pid)`: the inodes of the sockets listening on `port`, when `pid` holds them all."""
        self.specs = {s.name: s for s in specs}
        self.events: queue.SimpleQueue[int] = events if events is not None else queue.SimpleQueue()
        self.policy = policy
        self.state_file = state_file
        self.probe = probe
        self.clock = clock
        self.session_uid = session_uid
        self.read_procs = read_procs
        self.status = {name: Status(State.STOPPED, clock()) for name in self.specs}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.pumps: list[threading.Thread] = []
        self.state_unwritten = False  # a state write failed (a full disk): warned once
        self.timed_out: set[str] = set()  # services the supervisor killed for not answering in time
        self.held: dict[str, handover.Held] = {}  # the ports held for their services, for good
        self.guards: dict[str, socket.socket | None] = {}  # the IPv6 side of the others' ports
        self.ready_pipes: dict[str, int] = {}  # their read ends, while they start
        self.inodes: dict[str, tuple[int, ...]] = {}  # the sockets a RUNNING service listens on
        self.refused: set[int] = set()  # starts whose secret the gate refused (their pids): not failures

    def hold_ports(self) -> None:
        """Listen on the held services' ports and guard the IPv6 side of the others', before any
        service starts (a RigError: one is taken)."""
        for name, spec in self.specs.items():
            if spec.listen is not None and name not in self.held:
                self.held[name] = handover.hold(spec.listen, spec.port)
            elif spec.listen is None and name not in self.guards:
                self.guards[name] = handover.block_ipv6(spec.port)

    def run(self) -> int:
        """Supervise until a stop signal; 0 after a clean stop, 1 once a service is FATAL."""
        self.hold_ports()
        for name in self.specs:
            self._start(name)
        while True:
            with contextlib.suppress(queue.Empty):
                if self.events.get(timeout=TICK) in STOP_SIGNALS:
                    return self.stop()
            self._tick()
            if any(s.state is State.FATAL for s in self.status.values()):
                self.stop()
                return 1

    def _set(self, name: str, status: Status) -> None:
        self.status[name] = status
        self._write_state()

    def _start(self, name: str) -> None:
        spec = self.specs[name]
        logger = log.get(name)
        handed = handover.hand_over(self.held[name]) if name in self.held else None
        try:
            proc = spawn(spec, handed.env if handed else None, handed.fds if handed else (), self._refused)
        except OSError as e:
            if handed:
                os.close(handed.ready_read)
            self._failed(name, f"cannot start {spec.argv[0]}: {e}")
            return
        finally:
            if handed:
                os.close(handed.ready_write)
        if handed:
            self.ready_pipes[name] = handed.ready_read
        self.procs[name] = proc
        assert proc.stdout is not None
        pump = threading.Thread(
            target=servicelog.pump, args=(proc.stdout, logger), name=f"log-{name}", daemon=True
        )
        pump.start()
        self.pumps.append(pump)
        self._set(name, replace(self.status[name], state=State.STARTING, since=self.clock()))

    def _refused(self, pid: int, _why: str) -> None:
        """From the gate's thread: the start of pid is ended by the loop and counts no failure."""
        self.refused.add(pid)
        self.events.put(signal.SIGCHLD)  # wake the loop

    def _failed(self, name: str, how: str, killed: bool = False, refused: bool = False) -> None:
        now = self.clock()
        users_own = self.specs[name].ids is not None
        new = after_exit(self.status[name], now, self.policy, users_own, killed, refused)
        self._set(name, new)
        if new.state is State.FATAL:
            log.get(name).error(
                "%s, %d failures in a row (FATAL): stopping the workstation with exit code 1, so that "
                "the container's restart policy starts it afresh",
                how,
                new.failures,
            )
        else:
            log.get(name).warning("%s; restarting in %.0f s", how, new.retry_at - now)

    def _tick(self) -> None:
        now = self.clock()
        for name, status in self.status.items():
            logger = log.get(name)
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is not None:
                del self.procs[name]
                self._forget(name)
                _signal_group(proc.pid, signal.SIGKILL)  # leftovers of the dead service's group
                code = proc.returncode
                ours = name in self.timed_out
                self.timed_out.discard(name)
                refused = proc.pid in self.refused
                self.refused.discard(proc.pid)
                self._failed(
                    name,
                    f"exited (killed by signal {-code})" if code < 0 else f"exited (code {code})",
                    killed=code < 0 and not ours,
                    refused=refused,
                )
            elif proc is not None and proc.pid in self.refused:
                _signal_group(proc.pid, signal.SIGKILL)  # stopped or traced: it never gets its secret
            elif status.state is State.STARTING and proc is not None:
                inodes = self._listens(name, proc.pid)
                if inodes:
                    self.inodes[name] = inodes
                    self._forget_pipe(name)
                    self._set(name, replace(status, state=State.RUNNING, since=now))
                    logger.info("running on port %d (pid %d)", self.specs[name].port, proc.pid)
                elif now - status.since > self.policy.start_timeout:
                    logger.error(
                        "no answer on port %d after %.0f s; killing it",
                        self.specs[name].port,
                        now - status.since,
                    )
                    self.timed_out.add(name)  # a failure to start, whoever runs it
                    _signal_group(proc.pid, signal.SIGKILL)
            elif status.state is State.BACKOFF and now >= status.retry_at:
                self._start(name)

    def _listens(self, name: str, pid: int) -> tuple[int, ...]:
        """The inodes of the sockets the service listens on; empty: not (yet) its own port."""
        if name in self.held:
            pipe = self.ready_pipes.get(name)
            return (self.held[name].inode,) if pipe is not None and handover.is_ready(pipe) else ()
        return self.probe(self.specs[name].port, pid)

    def _forget_pipe(self, name: str) -> None:
        pipe = self.ready_pipes.pop(name, None)
        if pipe is not None:
            os.close(pipe)

    def _forget(self, name: str) -> None:
        """What the supervisor knew of a service's start that has ended."""
        self._forget_pipe(name)
        self.inodes.pop(name, None)

    def stop(self) -> int:
        """The users' jobs first (TERM, a grace period), then every service: TERM, a deadline, KILL,
        reap everything."""
        self._stop_sessions()
        live = dict(self.procs)
        if live:
            _logger.info("stopping %s", ", ".join(live))
        for proc in live.values():
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = self.clock() + self.policy.stop_timeout
        while any(p.poll() is None for p in live.values()) and self.clock() < deadline:
            if self._asked_again(TICK):
                break
        for name, proc in live.items():
            if proc.poll() is None:
                _logger.warning("%s did not stop within %.0f s; killing it", name, self.policy.stop_timeout)
            _signal_group(proc.pid, signal.SIGKILL)  # the group too: children that ignored TERM
            proc.wait()
        for pump in self.pumps:
            pump.join(timeout=1)
        for name in self.procs:
            self._forget(name)
        self.procs.clear()
        for held in self.held.values():
            held.close()
        self.held.clear()
        for guard in self.guards.values():
            if guard is not None:
                guard.close()
        self.guards.clear()
        for name in self.status:
            if self.status[name].state is not State.FATAL:
                self.status[name] = Status(State.STOPPED, self.clock())
        self._write_state()
        _logger.info("stopped")
        return 0

    def _asked_again(self, timeout: float) -> bool:
        """Wait up to `timeout` for events; True when a second TERM or Ctrl-C says: stop waiting."""
        with contextlib.suppress(queue.Empty):
            return self.events.get(timeout=timeout) in (signal.SIGINT, signal.SIGTERM)
        return False

    def _stop_sessions(self) -> None:
        """TERM to the top of every job of the users' sessions, then wait for all of them to exit.

        Looked at again every tick: an orphan becomes a top, and what a job (a shell script) starts
        meanwhile gets TERM too.
        """
        if self.session_uid is None:
            return
        started = self.clock()
        deadline = started + self.policy.session_grace
        sent: set[sessions.Key] = set()
        known: frozenset[sessions.Key] | None = None
        unreadable = False
        # Each service leads its own session (spawn's start_new_session): its pid is its sid.
        service_sids = frozenset(p.pid for p in self.procs.values())
        while True:
            try:
                plan = sessions.plan(self.read_procs(), self.session_uid, service_sids, {os.getpid()}, known)
            except Exception as e:  # whatever a user's process looks like, the jobs keep their grace
                if not unreadable:
                    _logger.warning("cannot read the processes (%s); trying again", log.printable(str(e)))
                unreadable = True
                if self.clock() >= deadline or self._asked_again(TICK):
                    return
                continue
            known = plan.known
            new = [p for p in plan.term if (p.pid, p.start) not in sent]
            for proc in new:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
                sent.add((proc.pid, proc.start))
            if new:
                _logger.info(
                    "SIGTERM to the sessions' jobs: %s; waiting up to %.0f s for them to exit",
                    sessions.describe(new),
                    max(0.0, deadline - self.clock()),
                )
            if not plan.wait:
                break
            if self.clock() >= deadline:
                _logger.warning(
                    "sessions' jobs still running after %.0f s (%s): %s; stopping anyway",
                    self.policy.session_grace,
                    SESSION_GRACE_ENV,
                    sessions.describe(plan.wait),
                )
                return
            if self._asked_again(TICK):
                _logger.warning("asked again: not waiting for %s", sessions.describe(plan.wait))
                return
        if sent:
            _logger.info("the sessions' jobs exited after %.1f s", self.clock() - started)

    def _write_state(self) -> None:
        """services.json for `rig health`; on a full disk one WARNING, and supervising goes on."""
        if self.state_file is None:
            return
        data = {
            name: {
                "state": s.state.value,
                "pid": self.procs[name].pid if name in self.procs else None,
                "port": self.specs[name].port,
                "inodes": list(self.inodes.get(name, ())),
                "failures": s.failures,
            }
            for name, s in self.status.items()
        }
        try:
            safefs.write_file(self.state_file, (json.dumps(data, indent=1) + "\n").encode())
        except OSError as e:
            if not self.state_unwritten:  # once: a full disk fails every write until space is freed
                _logger.warning(
                    "cannot write %s (%s): the healthcheck reports unhealthy until there is space again",
                    self.state_file,
                    e.strerror or e,
                )
            self.state_unwritten = True
            with contextlib.suppress(OSError):
                self.state_file.unlink(missing_ok=True)  # never a stale "running"
