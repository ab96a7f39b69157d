"""`rig doctor` on the host: the checks on tables of made-up machines, gathering on fake trees."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest
from rig import versions
from rig.errors import RigError
from rig.hardware import fabric
from rig.hardware.topology import Gpu, Topology
from rig.launch.binding import make_plan
from rig.observe import bench, doctor, doctor_gather
from rig.observe.bench import BenchResult, LoaderResult
from rig.observe.doctor import Check, DatasetFacts, Facts, GpuFact, Status
from rig.origins import Origin

from tests.helpers.datasets import make_dataset
from tests.scripts.fake_nvml import FakeGpu, FakeNvml

PASS, WARN, FAIL, SKIP = Status.PASS, Status.WARN, Status.FAIL, Status.SKIP

GIB, MIB = 1 << 30, 1 << 20
NODE0, NODE1 = frozenset(range(0, 8)), frozenset(range(8, 16))


def topo(allowed: frozenset[int] = NODE0 | NODE1, ngpus: int = 2) -> Topology:
    gpus = tuple(
        Gpu(index=i, bus_id=f"0000:{0x17 + i * 0x60:02x}:00.0", numa_node=i, local_cpus=(NODE0, NODE1)[i])
        for i in range(ngpus)
    )
    return Topology(gpus=gpus, allowed_cpus=allowed, node_cpus={0: NODE0, 1: NODE1})


# A workstation: libibverbs in the image, no RDMA device, one routed interface.
NO_FABRIC = fabric.Fabric((), (), True, ("eth0",), None, None, None)
IMAGE_SITE = "/opt/venv/lib/python3.11/site-packages"
USER_SITE = "/home/yolo/.local/lib/python3.11/site-packages"
IMAGE_ULTRALYTICS = Origin(
    "ultralytics", f"{IMAGE_SITE}/ultralytics", "ultralytics-opencv-headless", "8.4.190"
)


def healthy(**changes: Any) -> Facts:
    t = topo()
    facts = Facts(
        driver_version="550.54.15",
        gpus=(GpuFact(0, "NVIDIA H200", (9, 0)), GpuFact(1, "NVIDIA H200", (9, 0))),
        topology=t,
        plan=make_plan(t, 2),
        shm_total=64 * GIB,
        shm_free=64 * GIB,
        memlock=(-1, -1),
        stack=(64 * MIB, -1),
        seccomp=2,
        cap_bnd=1 << doctor.CAP_SYS_NICE,
        numa_nodes=2,
        fabric=NO_FABRIC,
        ultralytics=IMAGE_ULTRALYTICS,
        image_ultralytics=IMAGE_ULTRALYTICS,
    )
    return dataclasses.replace(facts, **changes)


def by_name(facts: Facts) -> dict[str, Check]:
    return {c.name: c for c in doctor.run_checks(facts)}


def test_a_healthy_box_passes_everything_it_can_check() -> None:
    checks = doctor.run_checks(healthy())
    assert {c.name: c.status for c in checks} == {
        "driver": PASS,
        "gpus": PASS,
        "kernels": PASS,
        "shm": PASS,
        "memlock": PASS,
        "fabric": PASS,
        "stack": PASS,
        "numa": PASS,
        "cap_sys_nice": PASS,
        "ultralytics": PASS,
        "settings": PASS,
        "dataset": SKIP,
        "read_speed": SKIP,
        "cache_ram": SKIP,
        "image_cache": SKIP,
        "bench": SKIP,
        "user packages": SKIP,
    }
    assert doctor.exit_code(checks) == 0
    assert "rank 1: GPU 0000:77:00.0 node 1 CPUs 8-15" in by_name(healthy())["numa"].detail


@pytest.mark.parametrize(
    ("version", "status"),
    [("550.54.15", PASS), ("530.30.02", PASS), ("535.104.05", PASS), ("530.30.01", FAIL),
     ("525.85.12", FAIL), ("470.82.01", FAIL), (None, FAIL)],
)  # fmt: skip
def test_driver_must_be_new_enough_for_cuda_12_1(version: str | None, status: str) -> None:
    check = doctor.check_driver(healthy(driver_version=version))
    assert check.status == status
    if status == FAIL:
        assert "530.30.02" in check.fix


@pytest.mark.parametrize(
    ("stack", "version", "status"),
    [("cu128", "570.26", PASS), ("cu128", "580.65.06", PASS), ("cu128", "565.57.01", FAIL),
     ("cu128", "550.54.15", FAIL), ("cu121", "550.54.15", PASS)],
)  # fmt: skip
def test_driver_minimum_is_the_stacks(stack: str, version: str, status: str) -> None:
    check = doctor.check_driver(healthy(cuda_stack=stack, driver_version=version))
    assert check.status == status
    assert f"stack {stack}" in check.detail
    if status == FAIL:
        assert ("570.26" if stack == "cu128" else "530.30.02") in check.fix


ARCHS = {s.name: s.archs for s in versions.STACKS}


# (compute capability, GPU, has kernels in cu121, in cu128)
KERNELS = [
    ((7, 5), "T4", True, True),
    ((8, 0), "A100", True, True),
    ((8, 6), "A10 / RTX 3090", True, True),
    ((8, 9), "L4 / RTX 4090", True, True),  # sm_86's binaries run on 8.9
    ((9, 0), "H100 / H200", True, True),
    ((10, 0), "B200", False, True),
    ((12, 0), "RTX 5090 / RTX PRO 6000", False, True),
]


@pytest.mark.parametrize(("capability", "gpu", "cu121", "cu128"), KERNELS)
def test_which_stack_has_kernels_for_which_gpu(
    capability: tuple[int, int], gpu: str, cu121: bool, cu128: bool
) -> None:
    assert doctor.has_kernels(capability, ARCHS["cu121"]) is cu121, gpu
    assert doctor.has_kernels(capability, ARCHS["cu128"]) is cu128, gpu
    expected = "cu121" if cu121 else "cu128"
    assert doctor.stack_for(capability) == versions.stack_named(expected)


@pytest.mark.parametrize(
    ("capability", "archs", "ok"),
    [((8, 9), ("sm_80",), True), ((8, 0), ("sm_86",), False), ((10, 0), ("sm_90",), False),
     ((10, 0), ("compute_90",), True), ((8, 6), ("compute_90",), False), ((9, 0), ("sm_90a",), True),
     ((10, 0), ("sm_90a",), False), ((12, 1), ("sm_120",), True), ((3, 7), ARCHS["cu121"], False)],
)  # fmt: skip
def test_cuda_binary_and_ptx_compatibility(
    capability: tuple[int, int], archs: tuple[str, ...], ok: bool
) -> None:
    assert doctor.has_kernels(capability, archs) is ok


def test_a_blackwell_gpu_on_cu121_fails_in_one_line_naming_cu128() -> None:
    gpus = (GpuFact(0, "NVIDIA H200", (9, 0)), GpuFact(1, "NVIDIA B200", (10, 0)))
    check = doctor.check_kernels(healthy(gpus=gpus, cuda_stack="cu121"))
    assert check.status == FAIL
    assert "\n" not in check.detail
    assert check.detail.startswith("GPU 1 (NVIDIA B200, sm_100): stack cu121's torch has kernels for sm_50")
    assert check.detail.endswith("use stack cu128 (yolo-rig:cu128)")
    assert "make build STACK=cu128" in check.fix and "570.26" in check.fix
    assert doctor.exit_code([check]) == 1
    passing = doctor.check_kernels(healthy(gpus=gpus, cuda_stack="cu128"))
    assert passing.status == PASS and "sm_100, sm_90" in passing.detail


def test_kernels_come_from_the_images_torch_when_it_was_read() -> None:
    # The table is the fallback; what torch in the image says wins.
    facts = healthy(gpus=(GpuFact(0, "NVIDIA B200", (10, 0)),), cuda_stack="cu121", arch_flags=("sm_100",))
    assert doctor.check_kernels(facts).status == PASS
    old = doctor.check_kernels(healthy(gpus=(GpuFact(0, "Tesla K80", (3, 7)),)))
    assert old.status == FAIL and "no yolo-rig stack" in old.detail and "cu128: sm_70" in old.fix
    assert doctor.check_kernels(healthy(gpus=(GpuFact(0, "NVIDIA H200"),))).status == SKIP


def test_no_gpu_fails_with_the_container_toolkit_fix() -> None:
    checks = by_name(
        healthy(gpus=(), nvml_error="NVML unavailable (NVMLError_LibraryNotFound)", topology=topo(ngpus=0))
    )
    assert checks["gpus"].status == FAIL
    assert "NVIDIA Container Toolkit" in checks["gpus"].fix and "--gpus all" in checks["gpus"].fix
    assert "NVMLError_LibraryNotFound" in checks["gpus"].detail
    assert checks["numa"].status == SKIP


@pytest.mark.parametrize(("requested", "status"), [(None, PASS), (1, PASS), (2, PASS), (4, FAIL)])
def test_gpus_must_match_what_was_asked(requested: int | None, status: str) -> None:
    check = doctor.check_gpus(healthy(requested_gpus=requested, requested_from=f"--gpus {requested}"))
    assert check.status == status
    if status == FAIL:
        assert "asks for 4 GPU(s) but 2 GPU(s) visible" in check.detail


def test_gpus_hidden_by_cuda_visible_devices_count_as_missing() -> None:
    one = Topology(gpus=topo().gpus[:1], allowed_cpus=NODE0 | NODE1, node_cpus={0: NODE0, 1: NODE1})
    check = doctor.check_gpus(healthy(topology=one, requested_gpus=2, requested_from="--gpus 2"))
    assert check.status == FAIL and "1 of them after CUDA_VISIBLE_DEVICES" in check.detail


@pytest.mark.parametrize(
    ("shm", "status", "words"),
    [(64 * MIB, WARN, "not enough for one loader worker"), (GIB, WARN, "fewer loader workers"),
     (16 * GIB, PASS, "")],
)  # fmt: skip
def test_shm_against_what_the_loader_workers_need(shm: int, status: str, words: str) -> None:
    # 2 ranks of 8 CPUs, batch 16 split in 8 per rank at 640 px: 8 workers x 2 ranks x 8 batches of 9.4 MiB.
    facts = healthy(shm_total=shm, shm_free=shm, shm_batches_per_worker=8)
    assert doctor.shm_need(facts, 8, 2) == 8 * 2 * 8 * (8 * 3 * 640 * 640)
    check = doctor.check_shm(facts)
    assert check.status == status and words in check.detail
    if status == WARN:
        assert "ipc: host" in check.fix and "shm_size: 2g" in check.fix


@pytest.mark.parametrize(
    ("memlock", "stack", "statuses"),
    [((-1, -1), (-1, -1), (PASS, PASS)), ((8 * MIB, 8 * MIB), (8 * MIB, -1), (WARN, WARN)),
     ((64 * 1024, -1), (64 * MIB, 64 * MIB), (WARN, PASS))],
)  # fmt: skip
def test_memlock_and_stack_limits(
    memlock: tuple[int, int], stack: tuple[int, int], statuses: tuple[str, str]
) -> None:
    checks = by_name(healthy(memlock=memlock, stack=stack))
    assert (checks["memlock"].status, checks["stack"].status) == statuses
    if statuses[0] == WARN:
        assert "memlock=-1" in checks["memlock"].fix
    if statuses[1] == WARN:
        assert "stack=67108864" in checks["stack"].fix


def test_cpus_off_the_gpus_nodes_warn_with_the_cpuset_fix() -> None:
    t = topo(allowed=NODE0)  # the container only got node 0's CPUs; GPU 1 sits on node 1
    check = doctor.check_numa(healthy(topology=t, plan=make_plan(t, 2)))
    assert check.status == WARN
    assert "cpuset" in check.fix and "0-15" in check.fix


def test_one_cpu_per_rank_warns() -> None:
    t = Topology(gpus=topo().gpus, allowed_cpus=frozenset({0, 8}), node_cpus={0: NODE0, 1: NODE1})
    check = doctor.check_numa(healthy(topology=t, plan=make_plan(t, 2)))
    assert check.status == WARN and "one CPU" in check.detail


@pytest.mark.parametrize(
    ("seccomp", "cap_bnd", "nodes", "status"),
    [(0, 0, 2, PASS), (2, 1 << 23, 2, PASS), (2, 0xA80425FB, 2, WARN), (2, 0xA80425FB, 1, PASS),
     (None, None, 2, WARN)],
)  # fmt: skip
def test_cap_sys_nice_for_memory_binding(
    seccomp: int | None, cap_bnd: int | None, nodes: int, status: str
) -> None:
    # 0xa80425fb is Docker's default capability set, which lacks CAP_SYS_NICE.
    check = doctor.check_sys_nice(healthy(seccomp=seccomp, cap_bnd=cap_bnd, numa_nodes=nodes))
    assert check.status == status
    if status == WARN:
        assert "SYS_NICE" in check.fix


def dataset(**kw: Any) -> DatasetFacts:
    base = DatasetFacts(
        "/datasets/demo/data.yaml", path="/datasets/demo/data.yaml", images=1000, sampled=256,
        sampled_bytes=256 * 100_000, read_s=0.5, cache_value="ram", cache_reason="1000 images fit",
    )  # fmt: skip
    return dataclasses.replace(base, **kw)


@pytest.mark.parametrize(
    ("changes", "statuses"),
    [({}, (PASS, PASS, PASS)),
     ({"path": None, "error": "not found", "sampled": 0, "cache_value": None}, (FAIL, SKIP, SKIP)),
     ({"images": 0, "sampled": 0, "cache_value": None}, (FAIL, SKIP, SKIP)),
     ({"unreadable": ("/datasets/demo/images/train/1.jpg",)}, (FAIL, PASS, PASS)),
     ({"read_s": 10.0}, (PASS, WARN, PASS)),
     ({"cache_value": "False", "cache_reason": "needs 40 GiB"}, (PASS, PASS, WARN))],
)  # fmt: skip
def test_dataset_checks(changes: dict[str, Any], statuses: tuple[str, str, str]) -> None:
    checks = by_name(healthy(dataset=dataset(**changes)))
    assert (checks["dataset"].status, checks["read_speed"].status, checks["cache_ram"].status) == statuses
    assert all(
        checks[n].fix for n in ("dataset", "read_speed", "cache_ram") if checks[n].status in (WARN, FAIL)
    )


def bench_result(ours_img_s: float, step_img_s: float, bottleneck: str) -> BenchResult:
    loader = LoaderResult(300.0, ours_img_s, ours_img_s / 300.0, [], [], {}, {}, [], 0.0)
    reason = f"loader {ours_img_s:.0f} img/s vs train step {step_img_s:.0f} img/s"
    if bottleneck == "optimizer":
        reason += (
            "; MuSGD's optimizer step takes 61% of the train step (62.2 ms, one every 4 steps of batch 16)"
        )
    return BenchResult(
        loader, step_img_s, None, bottleneck, reason, {}, "cpu", 4, False, False, None, step_img_s, None, None
    )


@pytest.mark.parametrize(
    ("bench", "error", "status", "words"),
    [(bench_result(400.0, 900.0, "loader"), None, WARN, "the bottleneck is loader"),
     (bench_result(1500.0, 900.0, "compute"), None, PASS, "the bottleneck is compute"),
     (bench_result(1500.0, 900.0, "host"), None, WARN, "the bottleneck is host"),
     (bench_result(1500.0, 900.0, "optimizer"), None, WARN, "the bottleneck is optimizer: MuSGD's optimizer"),
     (None, "RuntimeError: CUDA out of memory", FAIL, "rig bench failed")],
)  # fmt: skip
def test_bench_names_the_bottleneck(
    bench: BenchResult | None, error: str | None, status: Status, words: str
) -> None:
    check = doctor.check_bench(healthy(bench=bench, bench_error=error, bench_requested=True))
    assert check.status is status and words in check.detail
    if bench is not None and bench.bottleneck == "host":
        assert "bigger batch" in (check.fix or "")
    if bench is not None and bench.bottleneck == "optimizer":
        assert "61% of the train step" in check.detail and "batch above nbs" in (check.fix or "")


def test_text_report_prints_fixes_only_for_problems_and_json_lists_every_check() -> None:
    checks = doctor.run_checks(healthy(driver_version="470.82.01", memlock=(8 * MIB, 8 * MIB)))
    text = doctor.render_text(checks)
    assert text.count("fix: ") == 2
    assert text.splitlines()[0].startswith("fail  driver")
    assert text.splitlines()[-1] == "rig doctor: 9 pass, 1 warn, 1 fail, 6 skip"
    data = json.loads(doctor.render_json(checks))
    assert data["ok"] is False
    assert [c["name"] for c in data["checks"]] == [c.name for c in checks]
    assert len(data["checks"]) == len(doctor.CHECKS)
    assert doctor.exit_code(checks) == 1


# ------------------------------------------------------------------------------------------ gathering
def fake_root(tmp_path: Path, *, cap_bnd: str = "000001ffffffffff", memlock: str = "8388608") -> Path:
    root = tmp_path / "root"
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/status").write_text(
        f"Name:\trig\nCapEff:\t0000000000000000\nCapBnd:\t{cap_bnd}\nSeccomp:\t2\n"
    )
    (root / "proc/self/limits").write_text(
        "Limit                     Soft Limit           Hard Limit           Units     \n"
        "Max stack size            8388608              unlimited            bytes     \n"
        f"Max locked memory         {memlock}              {memlock}              bytes     \n"
    )
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  (dvs@U16)\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    )
    (root / "dev/shm").mkdir(parents=True)
    (root / "dev/nvidia0").touch()  # the GPU's device node: given to this container
    node = root / "sys/devices/system/node/node0"
    node.mkdir(parents=True)
    (node / "cpulist").write_text("0-3\n")
    (root / "sys/devices/system/cpu").mkdir(parents=True)
    (root / "sys/devices/system/cpu/online").write_text("0-3\n")
    gpu = root / "sys/bus/pci/devices/0000:17:00.0"
    gpu.mkdir(parents=True)
    for name, value in (
        ("vendor", "0x10de"),
        ("class", "0x030200"),
        ("numa_node", "0"),
        ("local_cpulist", "0-3"),
    ):
        (gpu / name).write_text(value + "\n")
    return root


def test_gather_reads_proc_sys_and_nvml_through_the_root(tmp_path: Path) -> None:
    facts = doctor_gather.gather(root=fake_root(tmp_path), environ={}, nvml_module=FakeNvml([FakeGpu()]))
    assert facts.driver_version == "550.54.15"
    assert facts.gpus == (GpuFact(0, "NVIDIA H200", (9, 0)),)
    assert facts.cuda_stack == "cu121"  # no RIG_STACK (outside the image): the default
    assert facts.memlock == (8 * MIB, 8 * MIB) and facts.stack == (8 * MIB, -1)
    assert facts.seccomp == 2 and facts.cap_bnd is not None and facts.cap_bnd >> 23 & 1
    assert facts.topology is not None and facts.topology.gpus[0].bus_id == "0000:17:00.0"
    assert facts.plan is not None and facts.plan.ranks[0].cpus == (0, 1, 2, 3)
    checks = by_name(facts)
    assert checks["driver"].status == PASS and checks["gpus"].status == PASS
    assert checks["memlock"].status == WARN and checks["numa"].status == PASS


def test_unwritable_settings_are_one_warning_with_the_fix() -> None:
    problem = "/workspace/.config/Ultralytics/settings.json is not writable by uid 1234: ..."
    checks = doctor.run_checks(healthy(settings_problem=problem))
    warned = [c for c in checks if c.status is WARN]
    assert [c.name for c in warned] == ["settings"] and warned[0].detail == problem
    assert "YOLO_CONFIG_DIR" in warned[0].fix and doctor.exit_code(checks) == 0


def test_gather_reads_the_settings_file_through_the_root(tmp_path: Path) -> None:
    root = fake_root(tmp_path)
    folder = root / "workspace/.config/Ultralytics"
    folder.mkdir(parents=True)
    (folder / "settings.json").write_text("{}")
    env = {"YOLO_CONFIG_DIR": "/workspace/.config"}
    facts = doctor_gather.gather(root=root, environ=env, nvml_module=FakeNvml([FakeGpu()]))
    assert facts.settings_file == "/workspace/.config/Ultralytics/settings.json"
    assert facts.settings_problem is None
    (folder / "settings.json").chmod(0o444)
    folder.chmod(0o555)
    try:
        if not os.access(folder / "settings.json", os.W_OK):  # root writes anywhere
            facts = doctor_gather.gather(root=root, environ=env, nvml_module=FakeNvml([FakeGpu()]))
            assert facts.settings_problem is not None and "not writable" in facts.settings_problem
    finally:
        folder.chmod(0o755)


def test_gather_without_nvml_falls_back_to_the_kernel_module_version(tmp_path: Path) -> None:
    facts = doctor_gather.gather(root=fake_root(tmp_path), environ={}, nvml_module=FakeNvml(init_error=12))
    assert facts.driver_version == "550.54.15" and facts.gpus == ()
    assert facts.nvml_error is not None and "NVML unavailable" in facts.nvml_error
    assert by_name(facts)["gpus"].status == FAIL


def test_requested_gpus_come_from_the_flag_or_nvidia_visible_devices() -> None:
    assert doctor_gather.requested_gpus("2", {}) == (2, "--gpus 2")
    assert doctor_gather.requested_gpus("0,2", {"NVIDIA_VISIBLE_DEVICES": "0"}) == ([0, 2], "--gpus 0,2")
    assert doctor_gather.requested_gpus("all", {}) == ("all", "")
    with pytest.raises(RigError, match="--gpus two: not a number"):
        doctor_gather.requested_gpus("two", {})
    assert doctor_gather.requested_gpus(None, {"NVIDIA_VISIBLE_DEVICES": "0,3"}) == (
        2,
        "NVIDIA_VISIBLE_DEVICES=0,3",
    )
    assert doctor_gather.requested_gpus(None, {"NVIDIA_VISIBLE_DEVICES": "all"}) == ("all", "")


def test_doctor_plans_the_gpus_that_gpus_names(tmp_path: Path) -> None:
    # `rig doctor --gpus 1,3` checks the binding of GPUs 1 and 3, as `rig train --gpus 1,3` uses them.
    root = fake_root(tmp_path)
    for i in (1, 2, 3):
        gpu = root / f"sys/bus/pci/devices/0000:{0x17 + i:02x}:00.0"
        gpu.mkdir(parents=True)
        for name, value in (("vendor", "0x10de"), ("class", "0x030200"), ("numa_node", "0")):
            (gpu / name).write_text(value + "\n")
        (root / f"dev/nvidia{i}").touch()
    facts = doctor_gather.gather(root=root, environ={}, gpus="1,3", nvml_module=FakeNvml([FakeGpu()] * 4))
    assert facts.plan is not None
    assert [r.gpu_bus_id for r in facts.plan.ranks] == ["0000:18:00.0", "0000:1a:00.0"]
    assert facts.requested_gpus == 2 and facts.requested_from == "--gpus 1,3"


def test_gather_dataset_reads_the_train_split(tmp_path: Path) -> None:
    root = fake_root(tmp_path)
    make_dataset(root / "datasets/demo", 20, path="demo")
    (root / "datasets/demo/images/train/dangling.jpg").symlink_to(tmp_path / "gone.jpg")
    d = doctor_gather.gather_dataset("demo/data.yaml", root, batch=16, imgsz=64, nranks=1, rank_cpus=1)
    assert d.error is None and d.path == str(root / "datasets/demo/data.yaml")
    assert d.images == 21 and d.sampled == 20
    assert d.sampled_bytes == sum(1000 + i for i in range(20))
    assert d.unreadable == (str(root / "datasets/demo/images/train/dangling.jpg"),)
    assert d.cache_value in ("ram", "False") and d.cache_reason


@pytest.mark.parametrize(
    ("yaml_text", "error"),
    [("train: images/missing\n", "does not exist"), ("names: {0: a}\n", "no 'train:' entry")],
)
def test_gather_dataset_reports_broken_yaml(tmp_path: Path, yaml_text: str, error: str) -> None:
    (tmp_path / "data.yaml").write_text(yaml_text)
    d = doctor_gather.gather_dataset(
        str(tmp_path / "data.yaml"), tmp_path, batch=16, imgsz=640, nranks=1, rank_cpus=1
    )
    assert d.error is not None and error in d.error
    assert doctor.check_dataset(healthy(dataset=d)).status == FAIL


def test_gather_dataset_not_found(tmp_path: Path) -> None:
    d = doctor_gather.gather_dataset("nowhere.yaml", tmp_path, batch=16, imgsz=640, nranks=1, rank_cpus=1)
    assert d.path is None and d.error is not None and "not found" in d.error


def test_bench_runs_rig_bench_quick_on_the_given_data(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bench.BenchOptions] = []
    result = bench_result(10.0, 100.0, "loader")

    def run_bench(opts: bench.BenchOptions) -> BenchResult:
        seen.append(opts)
        return result

    monkeypatch.setattr(bench, "run_bench", run_bench)
    assert doctor_gather.run_bench("/datasets/demo/data.yaml", batch=32, imgsz=320) == (result, None)
    # The loader against the step, as before: no levers, no stock run, nothing recorded for rig train.
    assert seen == [
        bench.BenchOptions(
            data="/datasets/demo/data.yaml",
            quick=True,
            batch=32,
            imgsz=320,
            levers=(),
            parts=("loader", "tail", "step", "run"),
            record=False,
        )
    ]

    def broken(opts: bench.BenchOptions) -> BenchResult:
        raise RuntimeError("CUDA error: out of memory")

    monkeypatch.setattr(bench, "run_bench", broken)
    assert doctor_gather.run_bench(None, batch=16, imgsz=640) == (
        None,
        "RuntimeError: CUDA error: out of memory",
    )


def test_user_packages_are_listed_and_a_shadowed_pin_warns() -> None:
    site = "/home/yolo/.local/lib/python3.11/site-packages"
    none = doctor.check_user_packages(doctor.Facts(user_site=site))
    assert none.status is SKIP and site in none.detail
    added = doctor.Facts(
        user_packages=(("rigdemo", "0.1", None), ("numpy", "1.26.4", "1.26.4")), user_site=site
    )
    listed = doctor.check_user_packages(added)
    assert listed.status is PASS
    assert listed.detail == f"2 added by you in {site}: rigdemo 0.1, numpy 1.26.4"
    shadow = doctor.Facts(user_packages=(("numpy", "2.0.0", "1.26.4"),), user_site=site)
    warned = doctor.check_user_packages(shadow)
    assert warned.status is WARN
    assert "numpy 2.0.0 over the image's 1.26.4" in warned.detail
    assert warned.fix.startswith("`pip uninstall numpy` as yolo")


def test_another_ultralytics_warns_naming_both_and_what_turned_off() -> None:
    mine = Origin("ultralytics", f"{USER_SITE}/ultralytics", "ultralytics", "8.4.100")
    passed = by_name(healthy())["ultralytics"]
    assert (
        passed.detail
        == f"ultralytics 8.4.190 ({IMAGE_SITE}/ultralytics, ultralytics-opencv-headless): the image's"
    )
    off = ("exact resume: off (no torch_utils.qat_state in 8.4.100)",)
    checks = doctor.run_checks(healthy(ultralytics=mine, ultralytics_off=off))
    warned = [c for c in checks if c.status is WARN]
    assert [c.name for c in warned] == ["ultralytics"] and doctor.exit_code(checks) == 0
    assert warned[0].detail == (
        f"your sessions and `rig train` import ultralytics 8.4.100 ({USER_SITE}/ultralytics, ultralytics), "
        f"not the image's ultralytics 8.4.190 ({IMAGE_SITE}/ultralytics, ultralytics-opencv-headless); "
        "turned off with it: exact resume: off (no torch_utils.qat_state in 8.4.100)"
    )
    assert warned[0].fix.startswith("`pip uninstall ultralytics` as yolo")
    # The same version from another folder is not the image's either.
    copy = IMAGE_ULTRALYTICS._replace(path="/src/ultralytics/ultralytics", dist="")
    assert by_name(healthy(ultralytics=copy))["ultralytics"].status is WARN
    assert by_name(healthy(ultralytics=copy))["ultralytics"].fix.startswith(
        "take /src/ultralytics/ultralytics off"
    )
    assert by_name(healthy(ultralytics=None))["ultralytics"].status is FAIL


def test_gather_finds_the_sessions_ultralytics_and_asks_what_turned_off(tmp_path: Path) -> None:
    root = fake_root(tmp_path)
    for site, dist, version in (
        (IMAGE_SITE, "ultralytics_opencv_headless", "8.4.190"),
        (USER_SITE, "ultralytics", "8.4.100"),
    ):
        (root / site.lstrip("/") / "ultralytics").mkdir(parents=True)
        (root / site.lstrip("/") / "ultralytics" / "__init__.py").write_text("")
        (root / site.lstrip("/") / f"{dist}-{version}.dist-info").mkdir()
        (root / site.lstrip("/") / f"{dist}-{version}.dist-info" / "top_level.txt").write_text(
            "ultralytics\n"
        )
    asked: list[Origin] = []

    def turned_off(found: Origin) -> list[str]:
        asked.append(found)
        return ["device augmentation: off (8.4.100 lacks it)"]

    env = {"PYTHONPATH": f"/opt/rig/python:{USER_SITE}"}
    kw: dict[str, Any] = {"root": root, "nvml_module": FakeNvml([FakeGpu()]), "python_path": ["", IMAGE_SITE]}
    kw["euid"] = 1000  # yolo's sessions, whoever runs the tests
    facts = doctor_gather.gather(environ=env, turned_off=turned_off, **kw)
    mine = Origin("ultralytics", f"{USER_SITE}/ultralytics", "ultralytics", "8.4.100")
    assert facts.ultralytics == mine and asked == [mine]
    assert facts.image_ultralytics == IMAGE_ULTRALYTICS
    assert facts.ultralytics_off == ("device augmentation: off (8.4.100 lacks it)",)
    # By default nothing is known to be off; root's sessions (no PYTHONPATH) import the image's.
    assert doctor_gather.gather(environ=env, **kw).ultralytics_off == ()
    assert doctor_gather.gather(environ={}, **kw).ultralytics == IMAGE_ULTRALYTICS
    assert doctor_gather.gather(environ=env, **{**kw, "euid": 0}).ultralytics == IMAGE_ULTRALYTICS
    # The user's packages name the pin plain `ultralytics` shadows.
    (root / "opt/venv/requirements.lock.txt").write_text(
        "ultralytics-opencv-headless==8.4.190 \\\n    --hash=sha256:00\n"
    )
    (root / USER_SITE.lstrip("/") / "numpy-1.0.dist-info").mkdir()
    facts = doctor_gather.gather(environ=env, **kw)
    assert facts.user_packages == (
        ("numpy", "1.0", None),
        ("ultralytics", "8.4.100", "ultralytics-opencv-headless 8.4.190"),
    )
    assert (
        "ultralytics 8.4.100 over the image's ultralytics-opencv-headless 8.4.190"
        in by_name(facts)["user packages"].detail
    )


# `rig doctor --data`: the node image cache for the dataset, where it is, how big, how warm.


def cache_facts(**cache: object) -> Facts:
    return Facts(dataset=DatasetFacts("d.yaml", path="/datasets/d.yaml", images=10, **cache))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("cache", "status", "said"),
    [
        ({}, Status.SKIP, "no readable dataset"),
        ({"image_cache_error": "node image cache not looked up (no cv2)"}, Status.SKIP, "no cv2"),
        ({"image_cache_path": "/cache/images/k.img"}, Status.PASS, "not built yet"),
        (
            {
                "image_cache_path": "/cache/images/k.img",
                "image_cache_bytes": 2 * GIB,
                "image_cache_resident": 2 * GIB,
            },
            Status.PASS,
            "2.0 GiB at /cache/images/k.img, warm: 100% in the page cache",
        ),
        (
            {
                "image_cache_path": "/cache/images/k.img",
                "image_cache_bytes": 2 * GIB,
                "image_cache_resident": GIB,
            },
            Status.PASS,
            "partly warm: 50%",
        ),
        (
            {"image_cache_path": "/c/k.img", "image_cache_bytes": GIB, "image_cache_resident": 0},
            Status.PASS,
            "cold",
        ),
    ],
)
def test_image_cache_check(cache: dict[str, object], status: Status, said: str) -> None:
    check = doctor.check_image_cache(cache_facts(**cache))
    assert check.status is status
    assert said in check.detail, check.detail


def test_no_dataset_skips() -> None:
    assert doctor.check_image_cache(Facts()).status is Status.SKIP


def test_gather_without_opencv_says_so(tmp_path: Path) -> None:
    # The host has no OpenCV: the lookup is reported as not done, never a crash.
    got = doctor_gather.image_cache_facts([tmp_path / "a.jpg"], 640)
    assert got.get("image_cache_error") or got.get("image_cache_path")


@pytest.mark.parametrize(
    ("found", "nnodes", "status", "words"),
    [
        (NO_FABRIC, 1, PASS, "one node (NVLink/PCIe within it); several would use NCCL between nodes"),
        (NO_FABRIC, 2, WARN, "2 node(s): NCCL between nodes over TCP sockets (no InfiniBand/RoCE device"),
        (dataclasses.replace(NO_FABRIC, rdma_devices=("mlx5_0",)), 1, WARN, "/dev/infiniband is not in the"),
        (
            dataclasses.replace(NO_FABRIC, rdma_devices=("mlx5_0",), uverbs=("uverbs0",)),
            2,
            PASS,
            "NCCL between nodes over InfiniBand/RoCE (mlx5_0 through uverbs0); NCCL picks eth0",
        ),
    ],
)
def test_the_fabric_a_multi_node_run_gets(found: fabric.Fabric, nnodes: int, status: str, words: str) -> None:
    check = by_name(healthy(fabric=found, nnodes=nnodes))["fabric"]
    assert check.status == status and words in check.detail, check
    if status == WARN:
        assert check.fix


def test_gather_reads_the_fabric_and_the_node_count_through_the_root(tmp_path: Path) -> None:
    from tests.helpers.fakesys import fabric_tree

    root = fabric_tree(fake_root(tmp_path), rdma=("mlx5_0",), uverbs=1, routes=("eth0",))
    env = {"PET_NNODES": "2", "PET_NODE_RANK": "0", "PET_MASTER_ADDR": "j-node-0-0.j"}
    facts = doctor_gather.gather(root=root, environ=env, nvml_module=FakeNvml([FakeGpu()]))
    assert facts.fabric == fabric.Fabric(("mlx5_0",), ("uverbs0",), True, ("eth0",), None, None, None)
    assert facts.nnodes == 2
    assert doctor_gather.node_count({"NNODES": "two"}) == 1
