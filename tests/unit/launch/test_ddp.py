"""How the ranks of a job hold together, decided on the host: the process group, the stop agreement,
the stop deadline, each rank's GPU, the default batch, the threads. The image tests
(tests/image/test_multigpu.py) run the same paths for real under torchrun."""

from __future__ import annotations

import os
import shlex
import signal
from pathlib import Path

import pytest
from rig import cli
from rig.errors import RigError
from rig.launch import binder, binding, ddp, job, rankside, trainer

from tests.helpers.fakesys import FakeSys, bus


# ---- 4: the process group -------------------------------------------------------------------------
def test_nccl_timeout_is_minutes_and_checked() -> None:
    assert ddp.nccl_timeout({}) == 1800
    assert ddp.nccl_timeout({"RIG_NCCL_TIMEOUT": "300"}) == 300
    for bad in ("10", "abc", "1e9", "-5"):
        with pytest.raises(
            RigError, match=rf"RIG_NCCL_TIMEOUT='{bad}': use whole seconds between 60 and 86400"
        ):
            ddp.nccl_timeout({"RIG_NCCL_TIMEOUT": bad})


@pytest.mark.parametrize(
    ("environ", "device", "local_rank", "cuda", "expected"),
    [
        # rig train: the trainer set the binder's choice as device=; the rank uses it, read nowhere else.
        ({}, "0", 1, True, ddp.DdpSetup(0, "nccl", 1800)),
        ({"RIG_CUDA_DEVICE": "1"}, "0", 1, True, ddp.DdpSetup(0, "nccl", 1800)),
        ({}, "0,2", 1, True, ddp.DdpSetup(2, "nccl", 1800)),  # Ultralytics' rule without the binder
        ({"RIG_NCCL_TIMEOUT": "90"}, "0,1", 0, False, ddp.DdpSetup(None, "gloo", 90)),
    ],
)
def test_ddp_setup(
    environ: dict[str, str], device: str, local_rank: int, cuda: bool, expected: ddp.DdpSetup
) -> None:
    assert ddp.ddp_setup(environ, device, local_rank, cuda) == expected


# ---- 10: the stop agreement is not a per-batch collective -------------------------------------------------
def test_the_ranks_compare_stop_flags_every_tenth_batch() -> None:
    due = [n for n in range(1, 31) if ddp.stop_check_due(n, distributed=True)]
    assert due == [10, 20, 30]
    assert all(ddp.stop_check_due(n, distributed=False) for n in range(1, 5))


# ---- 3: every stop signal, and the deadline ---------------------------------------------------------------
def test_checkpoint_every_default_off_and_bounds() -> None:
    assert ddp.checkpoint_every({}) == 900
    assert ddp.checkpoint_every({"RIG_CHECKPOINT_EVERY": "0"}) == 0  # epoch ends only
    assert ddp.checkpoint_every({"RIG_CHECKPOINT_EVERY": "5"}) == 5
    for bad in ("-1", "1.5", "soon", "99999999"):
        with pytest.raises(RigError, match=rf"RIG_CHECKPOINT_EVERY='{bad}': use whole seconds between 0 and"):
            ddp.checkpoint_every({"RIG_CHECKPOINT_EVERY": bad})


def test_stop_grace_default_and_bounds() -> None:
    assert ddp.stop_grace({}) == 90
    with pytest.raises(RigError, match="RIG_STOP_GRACE='0'"):
        ddp.stop_grace({"RIG_STOP_GRACE": "0"})


def test_int_hup_and_term_all_stop_between_batches_and_a_second_ctrl_c_stops_now() -> None:
    assert set(trainer.STOP_SIGNALS) == {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    flag = rankside.StopFlag()
    flag.handler(signal.SIGHUP, None)
    assert flag.signum == signal.SIGHUP
    flag.handler(signal.SIGTERM, None)
    assert flag.signum == signal.SIGHUP  # the first signal is the one reported
    ctrl_c = rankside.StopFlag()
    ctrl_c.handler(signal.SIGINT, None)
    with pytest.raises(KeyboardInterrupt):
        ctrl_c.handler(signal.SIGINT, None)


def test_bad_stop_grace_or_nccl_timeout_is_one_line_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "sys"
    FakeSys(root).node(0, "0-3").online("0-3").gpu(bus(0), 0, "0-3").gpu(bus(1), 0, "0-3")
    monkeypatch.setenv("RIG_STOP_GRACE", "forever")
    ids = f"{bus(0)},{bus(1)}"
    assert (
        cli.main(["train", "--sysfs-root", str(root), "--gpu-bus-ids", ids, "--dry-run", "data=x.yaml"]) == 1
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ERROR rig: RIG_STOP_GRACE='forever'"), err
    monkeypatch.delenv("RIG_STOP_GRACE")
    monkeypatch.setenv("RIG_CHECKPOINT_EVERY", "hourly")
    assert (
        cli.main(["train", "--sysfs-root", str(root), "--gpu-bus-ids", ids, "--dry-run", "data=x.yaml"]) == 1
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ERROR rig: RIG_CHECKPOINT_EVERY='hourly'"), err


# ---- 2: each rank exactly its GPU ----------------------------------------------------------------------
def _plan(indices: list[int | None]) -> list[binding.RankBinding]:
    return [
        binding.RankBinding(r, None if i is None else bus(i), 0, (r,), 0, gpu_index=i)
        for r, i in enumerate(indices)
    ]


@pytest.mark.parametrize(
    ("parent", "mode", "rank", "expected"),
    [
        (None, "one", 1, {"CUDA_VISIBLE_DEVICES": "2", "RIG_CUDA_DEVICE": "0"}),
        (None, "ordered", 1, {"CUDA_VISIBLE_DEVICES": "0,2", "RIG_CUDA_DEVICE": "1"}),
        ("4,5,6", "one", 1, {"CUDA_VISIBLE_DEVICES": "6", "RIG_CUDA_DEVICE": "0"}),
        ("GPU-a,GPU-b,GPU-c", "ordered", 0, {"CUDA_VISIBLE_DEVICES": "GPU-a,GPU-c", "RIG_CUDA_DEVICE": "0"}),
    ],
)
def test_each_rank_sees_its_gpu(parent: str | None, mode: str, rank: int, expected: dict[str, str]) -> None:
    assert binder.gpu_environment(_plan([0, 2]), rank, parent, mode) == expected


def test_cpu_ranks_keep_the_containers_gpu_variables() -> None:
    assert binder.gpu_environment(_plan([None, None]), 0, "0", "one") == {}


def test_the_plan_carries_each_ranks_gpu_index() -> None:
    plan = _plan([0, 2])
    assert [r.gpu_index for r in binding.from_json(binding.to_json(plan))] == [0, 2]


# ---- 5: the batch for the real world size (the rule itself: test_trainargs.py) --------------------------
def test_dry_run_without_batch_logs_the_total(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    root = tmp_path / "sys"
    fs = FakeSys(root).node(0, "0-5").online("0-5")
    ids = [bus(i) for i in range(3)]
    for b in ids:
        fs.gpu(b, 0, "0-5")
    argv = ["train", "--sysfs-root", str(root), "--gpu-bus-ids", ",".join(ids), "--dry-run", "data=x.yaml"]
    assert cli.main([*argv, "model=yolo11n.yaml", f"project={tmp_path / 'runs'}"]) == 0
    printed = capsys.readouterr()
    program = shlex.split(printed.out.strip())
    args = dict(a.split("=", 1) for a in program[program.index("rig.launch.trainer") + 1 :])
    assert args["batch"] == "48"
    assert "INFO launch: batch=48: Ultralytics' default 16 per GPU x 3 GPUs" in printed.err


# ---- 8: one OpenMP thread per CPU, whatever imported Ultralytics first ----------------------------------
def test_omp_threads_are_decided_from_the_environment_rig_found() -> None:
    found = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    now = {**found, "OMP_NUM_THREADS": "1"}  # what `import ultralytics` does when it is unset
    assert job.env_delta(found, now, 6)["OMP_NUM_THREADS"] == "6"
    mine = {**found, "OMP_NUM_THREADS": "3"}  # the user's own value wins
    assert "OMP_NUM_THREADS" not in job.env_delta(mine, mine, 6)


# ---- issue 21 item 7: rect= with several ranks ------------------------------------------------------
@pytest.mark.parametrize(
    ("rect", "world", "expected", "warned"),
    [
        ("True", 2, "False", True),
        ("1", 8, "False", True),
        ("True", 1, "True", False),
        ("False", 2, "False", False),
    ],
)
def test_rect_is_off_for_training_with_several_ranks(
    rect: str, world: int, expected: str, warned: bool
) -> None:
    args, warning = ddp.without_rect({"rect": rect, "epochs": "3"}, world)
    assert args == {"rect": expected, "epochs": "3"}
    assert (warning is not None) == warned
    assert warning is None or warning.startswith(f"rect={rect} with {world} ranks: rect is off for training")
    assert ddp.without_rect({"epochs": "3"}, 4) == ({"epochs": "3"}, None)


def test_rig_train_with_rect_on_two_gpus_warns_once_and_trains_without_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "sys"
    fs = FakeSys(root).node(0, "0-7").online("0-7")
    ids = [bus(i) for i in range(2)]
    for b in ids:
        fs.gpu(b, 0, "0-7")
    for name in ("NNODES", "NODE_RANK", "MASTER_ADDR", "WORLD_SIZE", "RANK"):
        monkeypatch.delenv(name, raising=False)
    argv = ["train", "--sysfs-root", str(root), "--gpu-bus-ids", ",".join(ids), "--dry-run"]
    assert cli.main([*argv, "rect=True", "data=x.yaml", f"project={tmp_path / 'runs'}"]) == 0
    out, err = capsys.readouterr()
    assert " rect=False " in out and "rect=True" not in out
    assert (
        err.count("WARNING") == 1
        and "WARNING launch: rect=True with 2 ranks: rect is off for training" in err
    )


# ---- issue 26, item 3: torchrun's store and the backends on the address the job names ------------
def test_a_single_node_store_gets_a_held_loopback_port_and_loopback_backends() -> None:
    from rig.launch import torchrun

    argv = ["--nnodes", "1", "--master-addr", "127.0.0.1", "--master-port", "0"]
    argv += ["--rdzv-endpoint", "127.0.0.1:0", "--no-python", "python", "x.py"]
    environ: dict[str, str] = {"NCCL_SOCKET_IFNAME": "eth9"}  # the job's own choice stays
    out, sockets = torchrun.prepare(argv, environ)
    [(host, port)] = sockets
    try:
        assert host == "127.0.0.1" and port > 0 and sockets[(host, port)].getsockname() == (host, port)
        assert out[out.index("--master-port") + 1] == str(port)
        assert out[out.index("--rdzv-endpoint") + 1] == f"127.0.0.1:{port}"
        assert environ == {"NCCL_SOCKET_IFNAME": "eth9", "GLOO_SOCKET_IFNAME": "lo"}
    finally:
        sockets[(host, port)].close()
    multi = ["--master-addr", "node0", "--master-port", "29400"]
    assert torchrun.prepare(multi, environ) == (multi, {})  # node 0 binds it when its store starts


def test_a_store_that_cannot_take_the_socket_still_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket
    import sys
    import types

    from rig.launch import torchrun

    calls: list[dict[str, object]] = []

    def store(host: str, port: int, world: int, is_master: bool, *args: object, **kwargs: object) -> str:
        calls.append(kwargs)
        if "master_listen_fd" in kwargs:
            raise RuntimeError("no listen fd in this backend")
        return "store"

    fake = types.ModuleType("static_tcp_rendezvous")
    fake.TCPStore = store  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch.distributed.elastic.rendezvous.static_tcp_rendezvous", fake)
    held = torchrun.listen("127.0.0.1", 0)
    port = held.getsockname()[1]
    torchrun.bind_store({("127.0.0.1", port): held})
    assert fake.TCPStore("127.0.0.1", port, 2, True) == "store"  # type: ignore[attr-defined]
    assert [sorted(c) for c in calls] == [["master_listen_fd"], []]
    probe = socket.socket()
    probe.bind(("127.0.0.1", port))  # the held socket was closed: the store may bind the port itself
    probe.close()
