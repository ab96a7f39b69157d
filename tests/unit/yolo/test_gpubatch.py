"""The per-GPU batch from the GPU's memory (rig.yolo.gpubatch): the decision on fake NVML facts for 16, 24,
80 and 141 GB GPUs and YOLO11n/s/m/x and YOLO26n/s/m/x, the memory model against what a crowded image's
train step measured, its rules (never above nbs, a total that divides nbs, the smallest GPU counts),
then `rig train --dry-run` on a fake /sys with a fake NVML: the batch it passes and its line."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
from rig import cli
from rig.yolo import gpubatch
from rig.yolo.gpubatch import GpuMemory

from tests.helpers.fakesys import FakeSys, bus
from tests.scripts.fake_nvml import FakeGpu, FakeNvml

GIB = 1 << 30
# Cards as NVML reports them (total), with what a driver and display keep before any run (used).
CARDS = {
    16: ("Tesla V100-SXM2-16GB", 16 * GIB, GIB // 2),
    24: ("NVIDIA GeForce RTX 4090", 24 * GIB, GIB),
    80: ("NVIDIA H100 80GB HBM3", 80 * GIB, GIB // 2),
    141: ("NVIDIA H200", 141 * GIB, GIB // 2),
}


def _gpu(size: int) -> GpuMemory:
    name, total, used = CARDS[size]
    return GpuMemory(name, total, total - used)


# The decision for each card and model at 640 px with AMP (COCO's 80 classes), one GPU, nbs=64.
EXPECTED = {
    (16, "yolo11n"): 32, (24, "yolo11n"): 64, (80, "yolo11n"): 64, (141, "yolo11n"): 64,
    (16, "yolo11s"): 16, (24, "yolo11s"): 32, (80, "yolo11s"): 64, (141, "yolo11s"): 64,
    (16, "yolo11m"): 8, (24, "yolo11m"): 16, (80, "yolo11m"): 64, (141, "yolo11m"): 64,
    (16, "yolo11x"): 4, (24, "yolo11x"): 8, (80, "yolo11x"): 32, (141, "yolo11x"): 64,
    (16, "yolo26n"): 32, (24, "yolo26n"): 32, (80, "yolo26n"): 64, (141, "yolo26n"): 64,
    (16, "yolo26s"): 16, (24, "yolo26s"): 32, (80, "yolo26s"): 64, (141, "yolo26s"): 64,
    (16, "yolo26m"): 8, (24, "yolo26m"): 16, (80, "yolo26m"): 64, (141, "yolo26m"): 64,
    (16, "yolo26x"): 4, (24, "yolo26x"): 8, (80, "yolo26x"): 32, (141, "yolo26x"): 64,
}  # fmt: skip

# A train step's memory per image at 640 px with 100 boxes in each image (a crowded one), fp32 and AMP,
# MiB: tools/measure_activation_bytes.py --imgsz 640 --objects 100 in the image, the largest of two runs
# (BENCHMARKS.md "Memory per image"). YOLO26's end-to-end head assigns each box twice.
CROWDED = {
    "yolo11n": (156, 303),
    "yolo11s": (262, 515),
    "yolo26n": (178, 341),
    "yolo26s": (316, 617),
}


@pytest.mark.parametrize("model", list(CROWDED))
def test_the_memory_per_image_covers_a_crowded_images_measured_step(model: str) -> None:
    amp, fp32 = CROWDED[model]
    assert gpubatch.image_bytes(model, 640, amp=False, nc=80) >= fp32 * (1 << 20)
    assert gpubatch.image_bytes(model, 640, amp=True, nc=80) >= amp * (1 << 20)


@pytest.mark.parametrize(("size", "model"), list(EXPECTED))
def test_the_batch_fits_the_gpu_and_stays_within_nbs(size: int, model: str) -> None:
    choice = gpubatch.decide(model=f"{model}.pt", imgsz=640, gpus=[_gpu(size)], world=1, nbs=64)
    assert choice.per_gpu == EXPECTED[(size, model)], choice.reason
    assert choice.measured and 64 % choice.per_gpu == 0  # Ultralytics' accumulation reaches nbs exactly
    name = CARDS[size][0]
    assert choice.reason.startswith(f"{name} has ") and f"{model} at 640 px with AMP takes ~" in choice.reason
    assert "\n" not in choice.reason


def test_the_reason_names_the_bound_and_the_optimizer_steps() -> None:
    big = gpubatch.decide(model="yolo11n.yaml", imgsz=640, gpus=[_gpu(141)], world=1, nbs=64)
    assert big.reason.endswith(
        "; 64 per GPU, bounded by nbs=64 (64 images x 1 accumulated = 64 per optimizer step as in "
        "Ultralytics' recipe)"
    ), big.reason
    small = gpubatch.decide(model="yolo11x.yaml", imgsz=640, gpus=[_gpu(16)], world=1, nbs=64)
    assert "bounded by the memory (4 images x 16 accumulated = 64 per optimizer step" in small.reason


def test_more_memory_never_means_a_smaller_batch_and_bigger_images_a_bigger_one() -> None:
    for model in ("yolo11n", "yolo11s", "yolo11m", "yolo11x", "yolo26n", "yolo26s", "yolo26m", "yolo26x"):
        batches = [
            gpubatch.decide(model=model, imgsz=640, gpus=[_gpu(s)], world=1, nbs=64).per_gpu for s in CARDS
        ]
        assert batches == sorted(batches), (model, batches)
        sizes = [
            gpubatch.decide(model=model, imgsz=imgsz, gpus=[_gpu(16)], world=1, nbs=64).per_gpu
            for imgsz in (1280, 640, 320)
        ]
        assert sizes == sorted(sizes), (model, sizes)
    fp32 = gpubatch.decide(model="yolo11s", imgsz=640, gpus=[_gpu(24)], world=1, nbs=64, amp=False)
    assert fp32.per_gpu < EXPECTED[(24, "yolo11s")] and "in fp32" in fp32.reason


def test_several_gpus_share_nbs_and_the_smallest_free_memory_counts() -> None:
    # 4 GPUs: 16 each, 64 in all (accumulate 1), the recipe's optimizer steps.
    four = gpubatch.decide(model="yolo11n", imgsz=640, gpus=[_gpu(141)] * 4, world=4, nbs=64)
    assert four.per_gpu == 16 and "bounded by nbs=64 over 4 GPUs" in four.reason
    # 3 GPUs: no total divides 64; 21 each (63 in all) rather than 16 (48).
    three = gpubatch.decide(model="yolo11n", imgsz=640, gpus=[_gpu(141)] * 3, world=3, nbs=64)
    assert three.per_gpu == 21 and "63 images x 1 accumulated = 63 per optimizer step, nbs=64" in three.reason
    # 128 ranks: one image each, the least there is (the total passes nbs).
    assert gpubatch.decide(model="yolo11n", imgsz=640, gpus=[_gpu(80)], world=128, nbs=64).per_gpu == 1
    # A busy GPU among free ones: its free memory decides for all.
    busy = GpuMemory("NVIDIA H100 80GB HBM3", 80 * GIB, 14 * GIB)
    mixed = gpubatch.decide(model="yolo11s", imgsz=640, gpus=[_gpu(80), busy], world=2, nbs=64)
    assert mixed.per_gpu == gpubatch.decide(model="yolo11s", imgsz=640, gpus=[busy], world=2, nbs=64).per_gpu
    assert "has 14.0 GiB free" in mixed.reason


def test_without_a_figure_or_a_reading_ultralytics_default_stays() -> None:
    for model in ("yolo11n-seg.pt", "/runs/detect/train/weights/last.pt", "my.yaml", "yolov5s.pt"):
        choice = gpubatch.decide(model=model, imgsz=640, gpus=[_gpu(80)], world=1, nbs=64)
        assert (choice.per_gpu, choice.measured) == (16, False)
        assert f"no memory figure for {Path(model).name}" in choice.reason
    none = gpubatch.decide(model="yolo11n.pt", imgsz=640, gpus=[], world=1, nbs=64)
    assert (none.per_gpu, none.measured) == (16, False)
    tiny = GpuMemory("a small GPU", 2 * GIB, GIB)
    assert gpubatch.decide(model="yolo11x", imgsz=1280, gpus=[tiny], world=1, nbs=64).reason.endswith(
        "even 1 image may not fit; give a smaller imgsz or model"
    )


def test_the_gpus_are_read_by_bus_id_through_nvml() -> None:
    fake = FakeNvml(
        [
            FakeGpu(name="NVIDIA H200", bus_id="00000000:18:00.0", mem_used=[GIB]),
            FakeGpu(
                name="NVIDIA H100 80GB HBM3", bus_id="00000000:3B:00.0", mem_total=80 * GIB, mem_used=[0]
            ),
        ]
    )
    found, state = gpubatch.read_gpus(["0000:3b:00.0"], fake)
    assert state == "ok" and found == [GpuMemory("NVIDIA H100 80GB HBM3", 80 * GIB, 80 * GIB)]
    assert not fake.initialised  # shut down after the read
    assert gpubatch.read_gpus(["0000:99:00.0"], fake) == ([], "NVML does not see every GPU of the run")
    found, state = gpubatch.read_gpus(["0000:18:00.0"], FakeNvml(init_error=9))
    assert found == [] and state.startswith("NVML unavailable")


# ---------------------------------------------------------------------------------------------
# rig train --dry-run: the call site


@pytest.fixture
def two_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    root = tmp_path / "sys"
    fs = FakeSys(root).node(0, "0-7").online("0-7")
    for i in range(2):
        fs.gpu(bus(i), 0, "0-7")
    gpus = [
        FakeGpu(name="NVIDIA GeForce RTX 4090", bus_id=bus(i), mem_total=24 * GIB, mem_used=[GIB])
        for i in range(2)
    ]
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(gpus))
    monkeypatch.setenv("RIG_CACHE_DIR", str(tmp_path / "cache"))
    return ["--sysfs-root", str(root), "--gpu-bus-ids", ",".join(bus(i) for i in range(2))]


def _batch(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[str | None, str]:
    assert cli.main(["train", "--dry-run", *argv]) == 0
    printed = capsys.readouterr()
    words = shlex.split(printed.out.strip())
    args = dict(a.split("=", 1) for a in words[words.index("rig.launch.trainer") + 1 :])
    return args.get("batch"), printed.err


def test_rig_train_without_batch_takes_it_from_the_gpus_memory(
    two_gpus: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = [*two_gpus, "data=x.yaml", f"project={tmp_path / 'runs'}"]
    batch, err = _batch([*base, "--gpus", "1", "model=yolo11s.yaml"], capsys)
    assert batch == "32"
    assert (
        "INFO launch: batch=32: NVIDIA GeForce RTX 4090 has 23.0 GiB free; yolo11s at 640 px with AMP" in err
    )
    batch, err = _batch([*base, "model=yolo11s.yaml"], capsys)  # two GPUs: 32 each, nbs in all
    assert batch == "64" and "32 per GPU, bounded by nbs=64 over 2 GPUs" in err
    # A user's batch is kept as given; so are AutoBatch's -1 and a resumed run's.
    for given in ("batch=8", "batch=-1"):
        batch, err = _batch([*base, "--gpus", "1", "model=yolo11s.yaml", given], capsys)
        assert batch == given.split("=")[1] and "INFO launch: batch=" not in err
    # A model without a figure: Ultralytics' default per GPU, and why.
    batch, err = _batch([*base, "model=yolo11s-seg.yaml"], capsys)
    assert (
        batch == "32" and "INFO launch: batch from the GPUs' memory: Ultralytics' default 16 per GPU" in err
    )


def test_the_line_for_a_model_without_a_figure_names_those_with_one() -> None:
    choice = gpubatch.decide(model="yolov5s.pt", imgsz=640, gpus=[_gpu(80)], world=1, nbs=64)
    assert "(measured: yolo11n/s/m/l/x, yolo26n/s/m/l/x)" in choice.reason
