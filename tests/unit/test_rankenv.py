"""rig.rankenv: the variables a launch hands its ranks, written and read back in one module."""

from __future__ import annotations

from rig import rankenv


def test_run_gpus_round_trip() -> None:
    pairs = [(0, "0000:18:00.0"), (2, "10000:3b:00.0")]
    assert rankenv.parse_run_gpus(rankenv.format_run_gpus(pairs)) == pairs
    assert rankenv.parse_run_gpus("x=0000:18:00.0,1=,3=gpu,4=00000000:AF:00.0") == [(4, "0000:af:00.0")]


def test_what_the_launcher_writes_the_ranks_read_back() -> None:
    env = rankenv.launch_variables([(3, "0000:1a:00.0"), (0, "0000:17:00.0")], "/runs/detect/train")
    assert rankenv.run_gpus(env) == [(3, "0000:1a:00.0"), (0, "0000:17:00.0")]
    assert rankenv.run_dir(env) == "/runs/detect/train"
    # A CPU run names no GPU (telemetry then follows CUDA_VISIBLE_DEVICES); a resume no folder.
    assert rankenv.launch_variables(None, None) == {}
    assert rankenv.run_gpus({}) is None and rankenv.run_dir({rankenv.RUN_DIR: ""}) is None
    assert rankenv.run_gpus(rankenv.launch_variables([], None)) == []


def test_the_binders_gpu_choice_reads_back_as_the_ranks_device() -> None:
    for mode, rank, device in (("one", 1, 0), ("ordered", 1, 1)):
        env = rankenv.gpu_variables([0, 2], rank, None, mode)
        assert rankenv.cuda_device(env) == device
    assert rankenv.cuda_device({}) is None
    assert rankenv.gpu_variables([None, None], 0, "0", "one") == {}


def test_binding_variables_size_omp_threads_unless_the_user_set_them() -> None:
    ours = rankenv.binding_variables([4, 5, 6, 7], 1, "0000:18:00.0", {})
    assert ours == {
        rankenv.CPUS: "4-7",
        rankenv.MEM_NODE: "1",
        rankenv.GPU_BUS_ID: "0000:18:00.0",
        "OMP_NUM_THREADS": "4",
    }
    users = rankenv.binding_variables([0], None, None, {"OMP_NUM_THREADS": "2"})
    assert "OMP_NUM_THREADS" not in users and users[rankenv.MEM_NODE] == ""
    rigs = {"OMP_NUM_THREADS": "8", rankenv.ENV_DEFAULTS: "CUDA_DEVICE_ORDER,OMP_NUM_THREADS"}
    assert rankenv.binding_variables([0, 1], None, None, rigs)["OMP_NUM_THREADS"] == "2"
