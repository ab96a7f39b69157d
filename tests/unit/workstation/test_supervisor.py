"""The supervisor: pure transitions, real child processes with signals injected into its queue,
stopping the users' jobs first (a fake /proc), and bounded service output."""

from __future__ import annotations

import logging
import os
import queue
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from rig.errors import RigError
from rig.workstation import services, sessions
from rig.workstation.supervisor import Policy, State, Status, Supervisor, after_exit

from tests.helpers.logrecords import Records
from tests.helpers.waiting import wait_until

# ---- supervisor: pure transitions ----------------------------------------------------------------
POLICY = Policy(max_failures=3, backoff_base=1, backoff_cap=3, stable_after=60)


def test_backoff_grows_then_fatal() -> None:
    s = Status(State.STARTING, since=0)
    s = after_exit(s, 1, POLICY)
    assert (s.state, s.failures, s.retry_at) == (State.BACKOFF, 1, 2)
    s = after_exit(Status(State.STARTING, 2, s.failures), 3, POLICY)
    assert (s.state, s.failures, s.retry_at) == (State.BACKOFF, 2, 5)
    s = after_exit(Status(State.STARTING, 5, s.failures), 6, POLICY)
    assert (s.state, s.failures) == (State.FATAL, 3)


def test_a_stable_run_resets_the_failure_count() -> None:
    s = after_exit(Status(State.RUNNING, since=0, failures=2), 61, POLICY)
    assert (s.state, s.failures, s.retry_at) == (State.BACKOFF, 1, 62)
    s = after_exit(Status(State.RUNNING, since=0, failures=2), 30, POLICY)
    assert s.state is State.FATAL


# ---- supervisor: real child processes, signals injected into its queue ---------------------------
def _spec(name: str, code: str, port: int) -> services.ServiceSpec:
    return services.ServiceSpec(name, (sys.executable, "-c", code), port, dict(os.environ), None, Path("/"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purpose (the test process is not its parent).
    return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


def _run_in_thread(sup: Supervisor) -> tuple[list[int], object]:
    import threading

    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(sup.run()), daemon=True)
    thread.start()
    return result, thread


def test_crash_restarts_only_that_service_then_fatal_stops_everything_with_exit_1(
    tmp_path: Path, records: Records
) -> None:
    events: queue.SimpleQueue[int] = queue.SimpleQueue()
    policy = Policy(max_failures=3, backoff_base=0.2, backoff_cap=0.4, stop_timeout=5)
    specs = [_spec("steady", "import time; time.sleep(60)", 1), _spec("crashy", "raise SystemExit(3)", 2)]
    sup = Supervisor(
        specs,
        events=events,
        policy=policy,
        state_file=tmp_path / "s.json",
        probe=lambda p, pid: (7,) if p == 1 else (),
    )
    result, thread = _run_in_thread(sup)
    wait_until(lambda: sup.status["steady"].state is State.RUNNING)
    steady_pid = sup.procs["steady"].pid
    thread.join(timeout=15)  # type: ignore[attr-defined]
    assert result == [1]  # nobody asked it to stop: the FATAL service did
    assert sup.status["crashy"].state is State.FATAL and sup.status["crashy"].failures == 3
    assert not _alive(steady_pid)
    assert sup.status["steady"].state is State.STOPPED
    assert '"fatal"' in (tmp_path / "s.json").read_text()
    errors = records.lines(logging.ERROR)
    assert len(errors) == 1, errors
    assert errors[0].startswith("rig.crashy: exited (code 3), 3 failures in a row (FATAL): stopping")
    assert records.lines(logging.WARNING) == ["rig.crashy: exited (code 3); restarting in 0 s"] * 2
    assert records.lines(logging.INFO)[-1] == "rig.serve: stopped"


def test_a_service_that_cannot_start_goes_fatal_with_one_error_line(records: Records) -> None:
    spec = services.ServiceSpec("ghost", ("/nonexistent/ghost",), 1, {}, None, Path("/"))
    sup = Supervisor([spec], policy=Policy(max_failures=2, backoff_base=0.1), probe=lambda p, pid: ())
    assert sup.run() == 1
    errors = records.lines(logging.ERROR)
    assert len(errors) == 1 and errors[0].startswith("rig.ghost: cannot start /nonexistent/ghost:"), errors


def test_term_then_kill_after_the_deadline() -> None:
    events: queue.SimpleQueue[int] = queue.SimpleQueue()
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    sup = Supervisor(
        [_spec("stubborn", stubborn, 1)],
        events=events,
        policy=Policy(stop_timeout=1),
        probe=lambda p, pid: (7,),
    )
    result, thread = _run_in_thread(sup)
    wait_until(lambda: sup.status["stubborn"].state is State.RUNNING)
    time.sleep(0.3)  # let it install its SIG_IGN
    pid = sup.procs["stubborn"].pid
    started = time.monotonic()
    events.put(signal.SIGTERM)
    thread.join(timeout=10)  # type: ignore[attr-defined]
    assert result == [0]
    assert 1 <= time.monotonic() - started < 5
    assert not _alive(pid)


def test_every_service_fatal_exits_non_zero() -> None:
    sup = Supervisor(
        [_spec("bad", "raise SystemExit(1)", 1)], policy=Policy(max_failures=2, backoff_base=0.1)
    )
    assert sup.run() == 1


# ---- stopping: the users' jobs first ---------------------------------------------------------------
YOLO = 4321


def _fake_proc(root: Path, procs: list[tuple[int, int, int, int, str, str]]) -> Path:
    """A /proc tree: (pid, ppid, sid, uid, comm, state) per process, plus files that are no process."""
    for pid, ppid, sid, uid, comm, state in procs:
        d = root / str(pid)
        d.mkdir(parents=True)
        # Fields after "(comm)": state ppid pgrp session tty tpgid flags ... field 22 is starttime.
        rest = [state, ppid, pid, sid, 0, -1, 4194560, *[0] * 12, 1000 + pid, 0]
        (d / "stat").write_text(f"{pid} ({comm}) " + " ".join(map(str, rest)) + "\n")
        (d / "status").write_text(f"Name:\t{comm}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t1\t1\t1\t1\n")
    (root / "self").mkdir()
    (root / "net").mkdir()
    (root / "uptime").write_text("1.0 1.0\n")
    return root


# The container as `ps` shows it with an SSH session, a Jupyter terminal and a kernel busy.
WORKSTATION = [
    (1, 0, 1, 0, "tini", "S"),
    (7, 1, 1, 0, "rig", "S"),  # rig serve
    (19, 7, 19, 0, "sshd", "S"),  # the sshd service
    (21, 7, 21, YOLO, "python", "S"),  # JupyterLab, its own session
    (23, 7, 23, YOLO, "tensorboard", "S"),
    (26, 23, 23, YOLO, "server", "S"),  # TensorBoard's data server: part of that service
    (40, 19, 40, 0, "sshd", "S"),  # `sshd: yolo [priv]`
    (41, 40, 40, YOLO, "sshd", "S"),  # `sshd: yolo@pts/0`: hangs up the session on TERM
    (42, 41, 42, YOLO, "bash", "S"),  # the login shell, idle
    (43, 42, 43, YOLO, "rig", "R"),  # `rig train` in the foreground (the trainer after exec)
    (44, 43, 43, YOLO, "pt_data_worker", "S"),  # its DataLoader worker: TERM would crash the trainer
    (50, 1, 45, YOLO, "python", "S"),  # `nohup python job.py &` over SSH: orphaned to PID 1
    (60, 21, 60, YOLO, "bash", "S"),  # a Jupyter terminal
    (61, 60, 61, YOLO, "torchrun", "S"),
    (62, 61, 61, YOLO, "python", "R"),  # a rank: torchrun forwards TERM itself
    (70, 21, 70, YOLO, "python", "S"),  # a notebook kernel
    (71, 60, 71, YOLO, "tmux", "S"),
    (72, 71, 72, YOLO, "python (x) y", "S"),  # a job in tmux, odd name
    (80, 42, 43, YOLO, "sleep", "Z"),  # a zombie
    (90, 1, 90, 1001, "python", "S"),  # someone else's
    (99, 7, 99, YOLO, "python", "S"),  # excluded by the caller
]


def test_session_processes_from_a_fake_proc(tmp_path: Path) -> None:
    procs = sessions.read_proc(_fake_proc(tmp_path, WORKSTATION))
    assert 80 not in {p.pid for p in procs}  # zombies are gone already
    odd = next(p for p in procs if p.pid == 72)
    assert (odd.comm, odd.ppid, odd.sid, odd.uid, odd.start) == ("python (x) y", 71, 72, YOLO, 1072)
    plan = sessions.plan(procs, YOLO, service_sids={19, 21, 23}, exclude={7, 99})
    assert sorted(p.pid for p in plan.term) == [43, 50, 61, 70, 72]
    assert sorted(p.pid for p in plan.wait) == [43, 44, 50, 61, 62, 70, 72]
    assert sorted(pid for pid, _ in plan.known) == [41, 42, 43, 44, 50, 60, 61, 62, 70, 71, 72]


def test_later_looks_follow_the_jobs_not_newcomers(tmp_path: Path) -> None:
    first = sessions.plan(
        sessions.read_proc(_fake_proc(tmp_path / "1", WORKSTATION)), YOLO, {19, 21, 23}, {7, 99}
    )
    later = [row for row in WORKSTATION if row[0] not in (43, 44, 70)] + [
        (100, 42, 43, YOLO, "sleep", "S"),  # the login shell's next command
        (101, 100, 43, YOLO, "python", "S"),  # ...and its child
        (102, 21, 102, YOLO, "python", "S"),  # the kernel Jupyter restarted after its TERM
        (103, 19, 103, YOLO, "sshd", "S"),  # a login that began during the stop
        (104, 103, 104, YOLO, "python", "S"),
    ]
    procs = sessions.read_proc(_fake_proc(tmp_path / "2", later))
    plan = sessions.plan(procs, YOLO, {19, 21, 23}, {7, 99}, first.known)
    assert sorted(p.pid for p in plan.term) == [50, 61, 72, 100]
    assert sorted(p.pid for p in plan.wait) == [50, 61, 62, 72, 100, 101]


def test_session_plan_with_nothing_running(tmp_path: Path) -> None:
    idle = [row for row in WORKSTATION if row[0] in (1, 7, 19, 21, 23, 26, 40, 41, 42, 60, 71)]
    plan = sessions.plan(sessions.read_proc(_fake_proc(tmp_path, idle)), YOLO, {19, 21, 23}, {7})
    assert (plan.term, plan.wait) == ((), ())


def test_read_proc_sees_this_process() -> None:
    me = next(p for p in sessions.read_proc() if p.pid == os.getpid())
    assert (me.ppid, me.uid, me.sid) == (os.getppid(), os.getuid(), os.getsid(0))


@pytest.mark.parametrize(
    ("comm", "wait", "why"),
    [
        ("python", True, "a job"),
        ("rig", True, "a job"),
        ("torchrun", True, "a job"),
        ("bash", False, "ignores SIGTERM"),
        ("sh", False, "ignores SIGTERM"),
        ("zsh", False, "ignores SIGTERM"),
        ("tmux", False, "hang up"),
        ("screen", False, "hang up"),
        ("sshd", False, "hang up"),
    ],
)
def test_wait_for_jobs_not_for_shells_and_terminals(comm: str, wait: bool, why: str) -> None:
    got, reason = sessions.wait_for(sessions.Proc(1, 0, 1, YOLO, comm))
    assert got is wait and why in reason


def _children(children: dict[str, subprocess.Popen[bytes]]) -> Callable[[], list[sessions.Proc]]:
    """A /proc of the test's own children only, named as given: never the host's processes."""

    def read() -> list[sessions.Proc]:
        me = os.getpid()
        return [
            sessions.Proc(p.pid, me, p.pid, YOLO, comm) for comm, p in children.items() if p.poll() is None
        ]

    return read


SAVES_ON_TERM = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: (time.sleep(1), open(sys.argv[1], 'w').write(str(time.time())),"
    " sys.exit(0)))\n"
    "open(sys.argv[1] + '.ready', 'w').close()\n"
    "time.sleep(60)\n"
)
IGNORES_TERM = (
    "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "open(sys.argv[1], 'w').close(); time.sleep(60)"
)


def test_stop_waits_for_jobs_then_stops_services_and_skips_idle_shells(
    tmp_path: Path, records: Records
) -> None:
    job = subprocess.Popen([sys.executable, "-c", SAVES_ON_TERM, str(tmp_path / "saved")])
    shell = subprocess.Popen([sys.executable, "-c", IGNORES_TERM, str(tmp_path / "shell.ready")])
    service_code = (
        "import signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, lambda *a: (open({str(tmp_path / 'svc')!r}, 'w')"
        ".write(str(time.time())), sys.exit(0)))\n"
        "time.sleep(60)\n"
    )
    try:
        wait_until(lambda: (tmp_path / "saved.ready").exists() and (tmp_path / "shell.ready").exists())
        events: queue.SimpleQueue[int] = queue.SimpleQueue()
        sup = Supervisor(
            [_spec("svc", service_code, 1)],
            events=events,
            policy=Policy(session_grace=30, stop_timeout=5),
            probe=lambda p, pid: (7,),
            session_uid=YOLO,
            read_procs=_children({"python": job, "bash": shell}),
        )
        result, thread = _run_in_thread(sup)
        wait_until(lambda: sup.status["svc"].state is State.RUNNING)
        time.sleep(0.3)  # the service's handler is installed
        started = time.monotonic()
        events.put(signal.SIGTERM)
        thread.join(timeout=20)  # type: ignore[attr-defined]
        took = time.monotonic() - started
        assert result == [0]
        assert job.wait(timeout=5) == 0  # it saved and exited by itself
        assert float((tmp_path / "saved").read_text()) <= float((tmp_path / "svc").read_text())
        assert 1 <= took < 10, took  # waited for the job's 1 s cleanup, not for the idle "shell"
        assert shell.poll() is None  # no TERM for a shell (it would have ignored it anyway)
        infos = records.lines(logging.INFO)
        assert f"rig.serve: SIGTERM to the sessions' jobs: {job.pid} python; waiting up to 30 s" in " ".join(
            infos
        )
        assert any(line.startswith("rig.serve: the sessions' jobs exited after") for line in infos), infos
        assert records.lines(logging.WARNING) == []
    finally:
        for p in (job, shell):
            p.kill()
            p.wait()


def test_stop_gives_up_on_a_job_after_the_session_grace(tmp_path: Path, records: Records) -> None:
    stubborn = subprocess.Popen([sys.executable, "-c", IGNORES_TERM, str(tmp_path / "ready")])
    try:
        wait_until(lambda: (tmp_path / "ready").exists())
        events: queue.SimpleQueue[int] = queue.SimpleQueue()
        sup = Supervisor(
            [_spec("svc", "import time; time.sleep(60)", 1)],
            events=events,
            policy=Policy(session_grace=1, stop_timeout=5),
            probe=lambda p, pid: (7,),
            session_uid=YOLO,
            read_procs=_children({"python": stubborn}),
        )
        result, thread = _run_in_thread(sup)
        wait_until(lambda: sup.status["svc"].state is State.RUNNING)
        started = time.monotonic()
        events.put(signal.SIGTERM)
        thread.join(timeout=20)  # type: ignore[attr-defined]
        assert result == [0]
        assert 1 <= time.monotonic() - started < 6
        warnings = records.lines(logging.WARNING)
        assert warnings == [
            f"rig.serve: sessions' jobs still running after 1 s (RIG_SESSION_GRACE): {stubborn.pid} python; "
            "stopping anyway"
        ]
    finally:
        stubborn.kill()
        stubborn.wait()


@pytest.mark.parametrize(
    ("environ", "grace", "timeout"),
    [({}, 100, 10), ({"RIG_SESSION_GRACE": "0", "RIG_STOP_TIMEOUT": "2.5"}, 0, 2.5)],
)
def test_stop_durations(environ: dict[str, str], grace: float, timeout: float) -> None:
    from rig.commands.serve import SESSION_GRACE, STOP_TIMEOUT

    assert SESSION_GRACE.read(environ) == grace
    assert STOP_TIMEOUT.read(environ) == timeout


@pytest.mark.parametrize("raw", ["-1", "abc", "3601", "nan", ""])
def test_bad_session_grace_is_one_line(raw: str) -> None:
    from rig.commands.serve import SESSION_GRACE

    with pytest.raises(
        RigError,
        match=rf"^RIG_SESSION_GRACE='{raw}': use seconds between 0 and 3600 \(default 100\); compose's",
    ):
        SESSION_GRACE.read({"RIG_SESSION_GRACE": raw})


# ---- issue 26, item 4: any process name, scripts get TERM ---------------------------------------
@pytest.mark.parametrize(
    "comm",
    [b"\xff\xfe", b"a) (b", b"\x1b[2J\rINFO serve: x", b"", b"()"],
    ids=["latin1", "parens", "esc", "empty", "()"],
)
def test_any_process_name_is_read_as_bytes_and_escaped(tmp_path: Path, comm: bytes) -> None:
    d = tmp_path / "4242"
    d.mkdir()
    rest = " ".join(map(str, ["S", 1, 4242, 4242, 0, -1, 0, *[0] * 12, 77, 0]))
    (d / "stat").write_bytes(b"4242 (" + comm + b") " + rest.encode() + b"\n")
    (d / "status").write_bytes(b"Name:\t" + comm + b"\nUid:\t1000\t1000\t1000\t1000\n")
    (d / "cmdline").write_bytes(comm + b"\0job.sh\0")
    (tmp_path / "77").mkdir()  # a process that vanished: no files
    (tmp_path / "78").mkdir()
    (tmp_path / "78" / "stat").write_bytes(b"garbage")
    (tmp_path / "78" / "status").write_bytes(b"")
    [proc] = sessions.read_proc(tmp_path)
    assert (proc.pid, proc.ppid, proc.uid, proc.start) == (4242, 1, 1000, 77)
    assert proc.comm.isprintable() and proc.argv[1] == "job.sh"
    assert sessions.describe([proc]).isprintable()


@pytest.mark.parametrize(
    ("argv", "interactive"),
    [
        ((), True),
        (("-bash",), True),
        (("bash",), True),
        (("/bin/bash", "-l"), True),
        (("bash", "--login", "-i"), True),
        (("bash", "--rcfile", "x.sh"), True),
        (("bash", "job.sh"), False),
        (("bash", "-e", "job.sh"), False),
        (("bash", "-o", "pipefail", "job.sh"), False),
        (("bash", "-c", "python x.py"), False),
        (("sh", "-ec", "trap 'x' TERM; sleep 9"), False),
        (("bash", "--", "job.sh"), False),
    ],
)
def test_interactive_shells_are_told_from_scripts(argv: tuple[str, ...], interactive: bool) -> None:
    assert sessions.interactive_shell(argv) is interactive
    proc = sessions.Proc(5, 1, 5, YOLO, "bash", 0, argv)
    assert sessions.wait_for(proc)[0] is not interactive


def test_a_script_and_what_it_runs_get_term_a_jobs_helpers_do_not() -> None:
    procs = [
        sessions.Proc(10, 1, 10, YOLO, "bash", 1, ("bash", "job.sh")),  # setsid nohup bash job.sh
        sessions.Proc(11, 10, 10, YOLO, "python", 1, ("python", "train.py")),
        sessions.Proc(12, 11, 10, YOLO, "pt_data_worker", 1, ("python", "train.py")),
        sessions.Proc(20, 1, 20, YOLO, "bash", 1, ("-bash",)),  # a login shell: no TERM, no wait
        sessions.Proc(21, 20, 20, YOLO, "sleep", 1, ("sleep", "9")),
    ]
    plan = sessions.plan(procs, YOLO, service_sids=set(), exclude=set())
    assert sorted(p.pid for p in plan.term) == [10, 11, 21]
    assert sorted(p.pid for p in plan.wait) == [10, 11, 12, 21]


def test_stop_keeps_the_grace_when_the_processes_cannot_be_read(records: Records) -> None:
    calls = iter([OSError("boom"), ValueError("odd")])

    def read() -> list[sessions.Proc]:
        error = next(calls, None)
        if error is not None:
            raise error
        return []

    sup = Supervisor([], policy=Policy(session_grace=30), session_uid=YOLO, read_procs=read)
    assert sup.stop() == 0
    assert records.lines(logging.WARNING) == ["rig.serve: cannot read the processes (boom); trying again"]


# ---- issue 26, item 9: a user's kills never spend the restart budget -----------------------------
def test_a_users_own_service_killed_again_and_again_never_goes_fatal() -> None:
    for now in range(1, 20):  # killed a second after each restart, answering or not yet
        s = Status(State.RUNNING if now % 2 else State.STARTING, since=now - 1)
        s = after_exit(s, now, POLICY, users_own=True, killed=True)
        assert (s.state, s.failures, s.retry_at) == (State.BACKOFF, 0, now + 1)
    s = Status(State.STARTING, since=0)
    for _ in range(POLICY.max_failures):  # failing to start by itself still counts
        s = after_exit(Status(State.STARTING, 0, s.failures), 1, POLICY, users_own=True)
    assert s.state is State.FATAL
    s = Status(State.STARTING, since=0)
    for _ in range(POLICY.max_failures):  # and a service of root's that is killed counts too
        s = after_exit(Status(State.STARTING, 0, s.failures), 1, POLICY, killed=True)
    assert s.state is State.FATAL
