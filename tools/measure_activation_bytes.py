"""Per-image training memory of Ultralytics' detection models, measured on the CPU (rig.yolo.gpubatch).

Run inside the image (torch and Ultralytics), no GPU needed:
    docker run --rm --network none -v "$PWD/tools:/tools:ro" --entrypoint /opt/venv/bin/python \
        yolo-rig:cu121 /tools/measure_activation_bytes.py [--imgsz 640] [MODEL ...]

For each model, one train step (forward, Ultralytics' detection loss, backward) at batch 1 and at batch
2, each in a fresh process, gives per image (the batch-2 figure minus the batch-1 one, so the weights,
gradients and every fixed cost cancel):
- saved: the bytes autograd keeps for the backward pass (saved_tensors_hooks, each storage counted
  once), in fp32 and under autocast (bfloat16 here: the same 2 bytes per element as CUDA's fp16);
- peak: the growth of the process's peak RSS over the step in fp32: the saved tensors plus what the
  backward pass holds at its worst (gradients of the activations, temporaries).
Prints one line per model and a Python dict of (AMP, fp32) per image: fp32 is the larger of the peak and
the saved bytes, AMP that times saved_amp / saved_fp32.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys

MODELS = (
    [f"yolo11{s}.yaml" for s in "nsmlx"]
    + [f"yolov8{s}.yaml" for s in "nsmlx"]
    + [f"yolo26{s}.yaml" for s in "nsmlx"]
)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def one(model_name: str, imgsz: int, batch: int, objects: int = 10) -> dict[str, int]:
    """In this process: the saved bytes (fp32, AMP) and the fp32 step's peak RSS growth, with `objects`
    boxes in each image (the loss's assignment grows with them: a crowded image's cost)."""
    import torch
    from ultralytics.nn.tasks import DetectionModel

    torch.manual_seed(0)
    torch.set_num_threads(max(os.cpu_count() or 1, 1))
    model = DetectionModel(model_name, nc=80, verbose=False)
    model.args = __import__("ultralytics.cfg", fromlist=["get_cfg"]).get_cfg()
    model.train()
    n_obj = objects
    img = torch.rand(batch, 3, imgsz, imgsz)
    targets = {
        "img": img,
        "batch_idx": torch.arange(batch).repeat_interleave(n_obj).float(),
        "cls": torch.randint(0, 80, (batch * n_obj, 1)).float(),
        "bboxes": torch.rand(batch * n_obj, 4) * 0.5 + 0.25,
    }

    def saved(amp: bool) -> int:
        seen: dict[int, int] = {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            s = t.untyped_storage()
            seen[s.data_ptr()] = s.nbytes()
            return t

        hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
        with hooks, torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss, _ = model(targets)
        loss.sum().backward()
        model.zero_grad(set_to_none=True)
        return sum(seen.values())

    # The peak first: ru_maxrss is the process's lifetime maximum, and the saved-bytes passes below run
    # whole steps too.
    before = _rss()
    loss, _ = model(targets)
    loss.sum().backward()
    model.zero_grad(set_to_none=True)
    del loss
    out = {"peak_fp32": max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before, 0)}
    out |= {"saved_fp32": saved(False), "saved_amp": saved(True)}
    out["params"] = sum(p.numel() for p in model.parameters())
    return out


def measure(model: str, imgsz: int, objects: int = 10) -> dict[str, float]:
    rows = []
    for batch in (1, 2):
        # The peak is a process's lifetime maximum: each batch in a fresh process.
        code = (
            f"import json, sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); "
            "import measure_activation_bytes as m; "
            f"print(json.dumps(m.one({model!r}, {imgsz}, {batch}, {objects})))"
        )
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
    per = {k: float(rows[1][k] - rows[0][k]) for k in ("saved_fp32", "saved_amp", "peak_fp32")}
    per["params"] = rows[0]["params"]
    # The peak's growth is read from RSS, which can fall short of the saved bytes (YOLOv8m, YOLO26x at
    # 320 px): the larger of the two stands for the fp32 step.
    per["fp32_per_image"] = max(per["peak_fp32"], per["saved_fp32"])
    per["amp_per_image"] = per["fp32_per_image"] * per["saved_amp"] / per["saved_fp32"]
    return per


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--imgsz", type=int, default=640)
    p.add_argument("--objects", type=int, default=10, help="boxes per image (default 10; 100: a crowded one)")
    p.add_argument("models", nargs="*", default=MODELS)
    a = p.parse_args()
    table = {}
    mib = 2**20
    for name in a.models:
        try:
            r = measure(name, a.imgsz, a.objects)
        except subprocess.CalledProcessError as e:
            print(f"{name}: failed: {e.stderr.strip().splitlines()[-1:]}", flush=True)
            continue
        print(
            f"{name}: params {r['params'] / 1e6:.1f}M, per image at {a.imgsz} with {a.objects} objects: "
            f"saved fp32 {r['saved_fp32'] / mib:.0f} MiB, saved AMP {r['saved_amp'] / mib:.0f} MiB, "
            f"peak fp32 {r['peak_fp32'] / mib:.0f} MiB (x{r['peak_fp32'] / r['saved_fp32']:.2f} saved), "
            f"AMP estimate {r['amp_per_image'] / mib:.0f} MiB",
            flush=True,
        )
        figures = (round(r["amp_per_image"] / mib), round(r["fp32_per_image"] / mib))
        table[name.removesuffix(".yaml")] = figures
    print("PER_IMAGE_MIB_AMP_FP32 =", table)


if __name__ == "__main__":
    main()
