"""The Python half of tools/gpu_check.sh: each measure's figures, appended to $OUT as they are read.

    gpu_check.py imports WORK                              # every module the check needs, or the one missing
    gpu_check.py env OUT DOCTOR_JSON DEVICE MODEL=DRYRUN...   # the machine, doctor, rig's batch per model
    gpu_check.py stock-train key=value ...                 # `yolo train` as its CLI runs it, with telemetry
    gpu_check.py runs OUT WORK IMAGES MODEL FILE RECIPE    # a) stock against rig train: figures, targets
    gpu_check.py tail OUT LOG                              # b) the device tail's probes
    gpu_check.py levers OUT BENCH_JSON MODEL LEVERS        # c) each step lever against eager, with losses
    gpu_check.py planner OUT DEVICE STEPS BATCH CASE...    # d) the planner against the peak
    gpu_check.py stop OUT NAME RC WANT RC2 LOG RESUMED_LOG MODEL   # e) a stop and its resume
    gpu_check.py again NOTES PART...                       # the parts --again runs
(each `python tools/gpu_check.py ...`)

Every figure goes to OUT/results.jsonl (one JSON object a line, with its part and, where it has one, its
model) and one readable line to OUT/summary.txt, each when it is measured: a check cut short keeps what
it had.

`runs` reads each run's telemetry.csv and args.yaml under WORK/runs (ours-MODEL and stock-MODEL, each
trained on IMAGES images) and measures it over its steps after the first epoch (start-up, cuDNN's
autotuning and any compile are the first epoch's): images/s by the wall clock and by step time, the
GPU's busy share (NVML), the share of step time waiting for data, peak memory (NVML from telemetry,
torch's from the PEAK line tools/gpu_check_site prints at the rank's exit), rig's batch and its reason
(rig train's log). Then the targets at 640 px: rig train without batch= at least TARGET_RATIO x stock
(YOLO11n and YOLO26n), TARGET_IMG_S images/s (YOLO11n), the GPU busy over TARGET_BUSY % of the measured
steps.
"""

from __future__ import annotations

import json
import math
import re
import resource
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

TARGET_RATIO = 3.0
TARGET_IMG_S = 1500.0
TARGET_BUSY = 90.0
TARGET_TAIL_MS = 0.5
IMG_S_TARGETS = {"yolo11n": TARGET_IMG_S}  # the models with an images/s target (H100/H200)
MIB = 1 << 20


def record(out: Path, part: str, line: str, **values: Any) -> None:
    """One measured result: a JSON line in results.jsonl and a readable one in summary.txt, appended."""
    with (out / "results.jsonl").open("a") as f:
        f.write(json.dumps({"part": part, **values}, default=str) + "\n")
    with (out / "summary.txt").open("a") as f:
        f.write(f"{time.strftime('%H:%M:%S', time.gmtime())}   {part}: {line}\n")


def fmt(v: float | None, spec: str = ".3g") -> str:
    return "n/a" if v is None else format(v, spec)


# ---------------------------------------------------------------------------------------------
# The preamble's import check


def imports(work: Path) -> int:
    """Every third-party module the check's code reaches (tools/gpu_wheels.py derives the same set),
    and rig's commands: one line naming the first that does not import. Then Ultralytics' settings
    (datasets, runs, weights) in the work folder, as the image keeps them out of the user's way."""
    import importlib

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import gpu_wheels

    modules = [*sorted(gpu_wheels.third_party()), "rig.cli", "rig.launch.nodes", "rig.launch.trainer"]
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as e:
            where = gpu_wheels.third_party().get(name.split(".")[0], name)
            dist = gpu_wheels.distribution(name.split(".")[0])
            print(
                f"ERROR gpu_check: {name} does not import ({type(e).__name__}: {e}), which {where} needs; "
                f"carry the {dist} wheel in .whl/ (make gpu-wheels)",
                file=sys.stderr,
            )
            return 1
    import torch
    import ultralytics

    print(
        f"INFO gpu_check: imports: torch {torch.__version__}, ultralytics {ultralytics.__version__}, "
        f"{len(modules)} modules"
    )
    return 0


# ---------------------------------------------------------------------------------------------
# env: the machine, rig doctor, the batch rig train adds


def env(out: Path, doctor_json: Path, device: str, dryruns: Sequence[str]) -> int:
    """The machine's line (GPU, driver, torch, date: what BENCHMARKS.md's rows give), each doctor check,
    and, for each MODEL=DRYRUN, the batch `rig train --dry-run` adds: from the GPU's memory on a GPU
    (one GPU too), none on the CPU. 1 when a dry run added the wrong thing or doctor gave no checks."""
    import subprocess

    import torch

    gpu, driver = "none", "n/a"
    if torch.cuda.is_available():
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        )
        if smi.returncode == 0 and smi.stdout.strip():
            gpu, driver = [*smi.stdout.splitlines()[0].split(", "), "n/a"][:2]
    record(
        out,
        "env",
        f"{gpu}, driver {driver}, torch {torch.__version__}",
        gpu=gpu,
        driver=driver,
        torch=torch.__version__,
        date=time.strftime("%Y-%m-%d", time.gmtime()),
    )
    checks = json.loads(doctor_json.read_text())["checks"] if doctor_json.is_file() else []
    for c in checks:
        record(
            out,
            "env",
            f"doctor {c['name']}: {c['status']}: {c['detail']}",
            check=c["name"],
            status=c["status"],
            detail=c["detail"],
        )
    every = True
    for item in dryruns:
        model, _, path = item.partition("=")
        added, reason, ok = dry_run_batch(Path(path).read_text(errors="replace"), cpu=device == "cpu")
        record(
            out,
            "env",
            f"rig train --dry-run model={model}.yaml adds {'batch=' + added if added else 'no batch'} "
            f"({reason})"
            + ("" if ok else f"; want {'none on the CPU' if device == 'cpu' else 'one from the GPU memory'}"),
            model=model,
            added=added,
            reason=reason,
            ok=ok,
        )
        every = every and ok
    return 0 if every and dryruns and checks else 1


def dry_run_batch(text: str, cpu: bool) -> tuple[str | None, str, bool]:
    """The batch `rig train --dry-run` added to the trainer's command, rig's line for it, and whether
    that is right: on a GPU, one GPU too, a batch from its memory; on the CPU, none (Ultralytics' 16)."""
    commands = [line for line in text.splitlines() if "rig.launch.trainer" in line]
    added = re.findall(r" batch=(\d+)", commands[-1]) if commands else []
    ok = bool(commands) and (not added if cpu else bool(added))
    return (added[-1] if added else None), batch_reason(text), ok


# ---------------------------------------------------------------------------------------------
# a) stock `yolo train` against `rig train` without batch=


@dataclass(frozen=True)
class RunFigures:
    name: str
    batch: int
    epochs: int
    steps: int  # measured: after the first epoch
    img_s_wall: float | None  # the measured steps' images over the wall-clock time they took
    img_s_steps: float | None  # the same over the steps' own time (telemetry's step time)
    busy_pct: float | None  # the GPU's mean utilisation over the measured samples
    data_wait: float | None  # share of step time waiting for the loader
    samples: int
    nvml_peak_mib: float | None = None  # the GPU's used memory at its highest (telemetry's samples)


def _floats(rows: Sequence[Mapping[str, str]], key: str) -> list[float]:
    return [float(r[key]) if r.get(key) not in (None, "") else math.nan for r in rows]


def measure_run(
    name: str, rows: Sequence[Mapping[str, str]], batch: int, steps_per_epoch: int, epochs: int, gpu: int = 0
) -> RunFigures:
    """One run's figures from its telemetry rows, the first epoch's steps left out."""
    done, first = 0, None
    for i, row in enumerate(rows):
        done += int(row.get("steps") or 0)
        if done >= steps_per_epoch:
            first = i + 1  # the row after the one that finished the first epoch
            break
    last = max((i for i, r in enumerate(rows) if int(r.get("steps") or 0) > 0), default=-1)
    measured = list(rows[first : last + 1]) if first is not None and last >= first else []
    steps = sum(int(r.get("steps") or 0) for r in measured)
    step_s = sum(_floats(measured, "step_s"))
    wait_s = sum(_floats(measured, "data_wait_s"))
    util = [v for v in _floats(measured, f"gpu{gpu}_util_pct") if not math.isnan(v)]
    mem = [v for v in _floats(rows, f"gpu{gpu}_mem_used_mib") if not math.isnan(v)]
    wall = (
        float(measured[-1]["elapsed_s"]) - float(rows[first - 1]["elapsed_s"]) if measured and first else 0.0
    )
    return RunFigures(
        name=name,
        batch=batch,
        epochs=epochs,
        steps=steps,
        img_s_wall=steps * batch / wall if wall > 0 else None,
        img_s_steps=steps * batch / step_s if step_s > 0 else None,
        busy_pct=sum(util) / len(util) if util else None,
        data_wait=wait_s / step_s if step_s > 0 else None,
        samples=len(measured),
        nvml_peak_mib=max(mem) if mem else None,
    )


def targets(
    ours: RunFigures | None, stock: RunFigures | None, img_s_target: float | None = TARGET_IMG_S
) -> dict[str, Any]:
    """The targets at 640 px: each figure and whether it is met (None: no figure); images/s only for a
    model with a target (img_s_target None: none)."""
    ours_img_s = ours.img_s_wall if ours else None
    stock_img_s = stock.img_s_wall if stock else None
    ratio = ours_img_s / stock_img_s if ours_img_s and stock_img_s else None
    busy = ours.busy_pct if ours else None

    def target(value: float | None, goal: float) -> dict[str, Any]:
        return {"value": value, "target": goal, "met": None if value is None else value >= goal}

    found = {"ratio_vs_stock": target(ratio, TARGET_RATIO)}
    if img_s_target is not None:
        found["img_s"] = target(ours_img_s, img_s_target)
    return found | {"gpu_busy_pct": target(busy, TARGET_BUSY)}


def _args_yaml(path: Path) -> dict[str, str]:
    """Ultralytics' args.yaml as flat key: value text (no YAML library needed for these keys)."""
    out = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition(":")
        if sep and not line.startswith((" ", "-")):
            out[key.strip()] = value.strip()
    return out


def _rows(path: Path) -> list[dict[str, str]]:
    import csv

    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def peaks(log: str) -> dict[str, Any]:
    """The largest PEAK line (tools/gpu_check_site/sitecustomize.py) of a run's log."""
    found = [json.loads(m) for m in re.findall(r"^PEAK (\{.*\})$", log, re.M)]
    return max(found, key=lambda p: (p.get("reserved_mib", 0), p["rss_mib"]), default={})


def batch_reason(log: str) -> str:
    """rig train's line for its batch: from the GPU's memory, or why Ultralytics' default."""
    found = re.findall(r"^INFO launch: (batch(?:=\d+| from the GPUs' memory): .*)$", log, re.M)
    return found[-1] if found else "no batch line: Ultralytics' default (no GPU, or batch= given)"


def runs(
    out: Path, work: Path, images: int, model: str, model_file: str = "", recipe: str = ""
) -> dict[str, Any]:
    """One model's pair (WORK/runs/ours-MODEL, stock-MODEL): each run's figures, then the targets."""
    figures: dict[str, RunFigures] = {}
    what = f"{model} ({model_file}{', ' + recipe if recipe else ''})" if model_file else model
    for name in ("stock", "ours"):
        run_dir = work / "runs" / f"{name}-{model}"
        csv_path, args_path = run_dir / "telemetry.csv", run_dir / "args.yaml"
        log_path = work / f"{name}-{model}.log"
        if not csv_path.is_file() or not args_path.is_file():
            record(
                out,
                "runs",
                f"{name} {what}: no telemetry.csv or args.yaml in {run_dir}",
                run=name,
                model=model,
                measured=False,
            )
            continue
        args = _args_yaml(args_path)
        batch, epochs = int(args.get("batch", "16")), int(args.get("epochs", "1"))
        f = measure_run(name, _rows(csv_path), batch, max(-(-images // batch), 1), epochs)
        figures[name] = f
        log = log_path.read_text(errors="replace") if log_path.is_file() else ""
        peak, reason = peaks(log), batch_reason(log) if name == "ours" else "Ultralytics' default recipe"
        record(
            out,
            "runs",
            f"{name} {what}: batch {f.batch}, optimizer {args.get('optimizer', '?')}, {f.steps} steps "
            f"measured: {fmt(f.img_s_wall)} img/s (steps alone "
            f"{fmt(f.img_s_steps)}), GPU busy {fmt(f.busy_pct, '.0f')} %, data wait "
            f"{fmt(f.data_wait and 100 * f.data_wait, '.0f')} %, "
            f"peak NVML {fmt(f.nvml_peak_mib, '.0f')} MiB, "
            f"torch {fmt(peak.get('reserved_mib'), '.0f')} MiB reserved; {reason}",
            **asdict(f),
            run=name,
            model=model,
            model_file=model_file,
            optimizer=args.get("optimizer"),
            torch_peak=peak,
            batch_reason=reason,
        )
    if "ours" not in figures or "stock" not in figures:
        return {}
    result = targets(figures["ours"], figures["stock"], IMG_S_TARGETS.get(model))
    for name, t in result.items():
        state = {True: "MET", False: "NOT MET", None: "not measured"}[t["met"]]
        record(
            out,
            "runs",
            f"target {name} {model}: {fmt(t['value'])} (target {t['target']:g}): {state}",
            name=name,
            model=model,
            **t,
        )
    return result


def stock_train(argv: Sequence[str]) -> int:
    """`yolo train` as its CLI runs it, with rig's telemetry timing the steps."""
    from rig.instrument import telemetry
    from ultralytics import YOLO
    from ultralytics.cfg import smart_value

    args: dict[str, Any] = {}
    for item in argv:
        key, _, value = item.partition("=")
        args[key] = value if key in {"model", "data", "project", "name", "device"} else smart_value(value)
    model = YOLO(args.pop("model"))
    telemetry.attach(model)  # into the run directory Ultralytics makes (its save_dir)
    model.train(**args)
    return 0


# ---------------------------------------------------------------------------------------------
# b) the device tail, c) the step's levers


def probes(log: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in log.splitlines() if line.startswith("PROBE ")]


def tail(out: Path, log_path: Path) -> int:
    """The warp probe's equality with OpenCV (affine and perspective cases apart) and the tail's ms per
    image (colour and layout alone, and with mosaic and the warp)."""
    found = probes(log_path.read_text(errors="replace"))
    for p in found:
        if p["mode"] == "warp":
            for kind in ("affine", "perspective"):
                cases = [c for c in p["cases"] if ("perspective" in c["settings"]) == (kind == "perspective")]
                pixels = sum(c["pixels"] for c in cases)
                off0 = sum(round((1 - c["exact"]) * c["pixels"]) for c in cases) / pixels if pixels else None
                off1 = sum(c["over1"] for c in cases) / pixels if pixels else None
                record(
                    out,
                    "tail",
                    f"{kind} warp on {p['device']} against OpenCV: {len(cases)} cases, {pixels} values, "
                    f"off by >0: {fmt(off0, '.2%')}, off by >1: {fmt(off1, '.4%')}",
                    kind=kind,
                    device=p["device"],
                    cases=len(cases),
                    values=pixels,
                    share_off_0=off0,
                    share_off_1=off1,
                )
        elif p["mode"] == "tail":
            what = "colour+layout" if p["moved"] == "colour" else "the whole tail (mosaic+warp+colour+layout)"
            record(
                out,
                "tail",
                f"{what} on {p['device']}, batch {p['batch']} at {p['imgsz']} px: "
                f"{p['ms_per_image']:.3f} ms/image "
                f"(target for the whole tail: {TARGET_TAIL_MS} ms/image)",
                **{
                    k: p[k]
                    for k in ("moved", "device", "batch", "imgsz", "ms_per_image", "ms_per_batch", "peak_gib")
                },
            )
    # mosaic+warp alone: the whole tail less colour+layout, at each batch and size timed both ways.
    timed = {(p["batch"], p["imgsz"], p["moved"]): p for p in found if p["mode"] == "tail"}
    for (batch, imgsz, moved), whole in sorted(timed.items()):
        colour = timed.get((batch, imgsz, "colour"))
        if moved != "geometry" or colour is None:
            continue
        geometry_ms = whole["ms_per_image"] - colour["ms_per_image"]
        record(
            out,
            "tail",
            f"mosaic+warp on {whole['device']}, batch {batch} at {imgsz} px: {geometry_ms:.3f} ms/image; "
            f"the whole tail {whole['ms_per_image']:.3f} ms/image (target {TARGET_TAIL_MS}): "
            + ("MET" if whole["ms_per_image"] <= TARGET_TAIL_MS else "NOT MET"),
            moved="mosaic+warp",
            batch=batch,
            imgsz=imgsz,
            ms_per_image=geometry_ms,
            whole_ms_per_image=whole["ms_per_image"],
            met=whole["ms_per_image"] <= TARGET_TAIL_MS,
        )
    modes = {p["mode"] for p in found}
    return 0 if {"warp", "tail"} <= modes else 1


def levers(out: Path, bench_json: Path, model: str = "", asked: str = "all") -> int:
    """One model's bench: the eager step with its optimizer's share, each lever (and amp=bf16) against
    it with the losses, and what rig train would switch on. 1 without an eager figure, or when a lever
    asked for is missing from the bench's figures."""
    r = json.loads(bench_json.read_text())
    step = r.get("step") or {}
    share, ms = step.get("optimizer_share"), step.get("optimizer_step_ms")
    record(
        out,
        "levers",
        f"{model}: eager {fmt(step.get('eager_img_s'))} img/s at batch {step.get('batch')} on "
        f"{r.get('device')} with {step.get('optimizer') or '?'}, its step {fmt(ms)} ms alone, "
        f"{fmt(share and 100 * share, '.0f')} % of the train step; AMP's noise {fmt(step.get('amp_noise'))} "
        f"over {step.get('equal_steps')} steps; bottleneck {r.get('bottleneck')}",
        lever="eager",
        model=model,
        img_s=step.get("eager_img_s"),
        batch=step.get("batch"),
        device=r.get("device"),
        optimizer=step.get("optimizer"),
        optimizer_step_ms=ms,
        optimizer_share=share,
        amp_noise=step.get("amp_noise"),
        losses=step.get("eager_losses"),
        bottleneck=r.get("bottleneck"),
        bottleneck_reason=r.get("bottleneck_reason"),
    )
    found = step.get("levers") or []
    for lv in found:
        gain = "not measured" if lv["gain"] is None else f"x{lv['gain']:.2f}"
        eq = "" if lv["equal"] is None else (", losses equal" if lv["equal"] else ", LOSSES DIFFER")
        note = f" ({lv['note']})" if lv.get("note") else ""
        what = "amp=bf16 against fp16" if lv["name"] == "bf16" else f"{lv['name']} on"
        record(
            out, "levers", f"{model}: {what}: {gain} of off{eq}{note}", lever=lv["name"], model=model, **lv
        )
    chosen = step.get("chosen") or []
    record(
        out,
        "levers",
        f"{model}: rig train would switch on: {'+'.join(chosen) or 'none'}",
        model=model,
        chosen=chosen,
        chosen_img_s=step.get("chosen_img_s"),
    )
    wanted = set(asked.split(",")) if asked != "all" else None
    missing = sorted((wanted or set()) - {lv["name"] for lv in found})
    if missing:
        record(
            out,
            "levers",
            f"{model}: MISSING from the bench: {', '.join(missing)}",
            model=model,
            missing=missing,
        )
    return 0 if step.get("eager_img_s") and not missing else 1


# ---------------------------------------------------------------------------------------------
# d) the batch planner's prediction against the measured peak


def _batch_of(b: int, s: int, nc: int, device: Any) -> dict[str, Any]:
    """A training batch as Ultralytics' loss takes it: images in [0, 1], 20 boxes each."""
    import torch

    per = 20
    g = torch.Generator().manual_seed(0)
    xy = torch.rand(b * per, 2, generator=g) * 0.8 + 0.1
    wh = torch.rand(b * per, 2, generator=g) * 0.1 + 0.02
    return {
        "img": torch.rand(b, 3, s, s, generator=g).to(device),
        "batch_idx": torch.arange(b).repeat_interleave(per).float().to(device),
        "cls": torch.randint(0, nc, (b * per, 1), generator=g).float().to(device),
        "bboxes": torch.cat([xy, wh], 1).to(device),
    }


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def planner(out: Path, device_name: str, steps: int, batch_text: str, cases: Sequence[str]) -> int:
    """Each CASE (MODEL:IMGSZ[:multi_scale]): the batch rig train picks on this GPU (BATCH "auto"; a
    number: that batch, for the CPU rehearsal's toy sizes), the memory the planner predicts for it, and
    the peak of that many train steps (torch's reserved and NVML's used); with multi_scale the steps
    run at its largest size, which the planner does not count."""
    import torch
    from rig.observe.bench import step
    from rig.yolo import gpubatch, ultra

    device = torch.device(device_name)
    cuda = device.type == "cuda"
    every, state = gpubatch.read_all() if cuda else ({}, "cpu")
    gpus = list(every.values())[:1]
    nbs = int(ultra.default("nbs"))
    ok = True
    for case in cases:
        model_name, imgsz_text, *rest = case.split(":")
        imgsz, multi = int(imgsz_text), float(rest[0]) if rest else 0.0
        choice = gpubatch.decide(model=model_name, imgsz=imgsz, gpus=gpus, world=1, nbs=nbs, amp=cuda)
        if batch_text != "auto":
            choice = gpubatch.BatchChoice(int(batch_text), f"batch={batch_text} given", False)
        key = gpubatch.model_key(model_name)
        if key is None:
            record(out, "planner", f"{case}: no planner figure for {model_name}", case=case, measured=False)
            ok = False
            continue
        predicted = gpubatch.fixed_bytes(key) + choice.per_gpu * gpubatch.image_bytes(key, imgsz, cuda, 80)
        size = int(imgsz * (1 + multi)) // 32 * 32 if multi else imgsz
        model = ultra.detection_model(f"{key}.yaml", 80).to(device).train()
        model.args = ultra.get_cfg({"imgsz": size, "batch": choice.per_gpu})
        optimizer = step.recipe_optimizer(key)  # the state it keeps: MuSGD's for YOLO26
        opt = step.trainer_optimizer(model, optimizer, nc=80, batch=choice.per_gpu)
        batch = _batch_of(choice.per_gpu, size, 80, device)
        rss0, error = _rss_mib(), None
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        try:
            scaler = torch.amp.GradScaler("cuda", enabled=cuda) if hasattr(torch, "amp") else None
            for _ in range(steps):
                with torch.autocast(device.type, enabled=cuda):
                    loss, _ = model(batch)
                loss = loss.sum()
                (scaler.scale(loss) if scaler else loss).backward()
                scaler.step(opt) if scaler else opt.step()
                if scaler:
                    scaler.update()
                opt.zero_grad()
            if cuda:
                torch.cuda.synchronize(device)
        except torch.cuda.OutOfMemoryError as e:  # a result: the plan did not hold at this size
            error = f"out of memory: {str(e).splitlines()[0][:160]}"
        if cuda:
            peak = torch.cuda.max_memory_reserved(device) / MIB
            used = _nvml_used_mib()
        else:
            peak, used = max(_rss_mib() - rss0, 0.0), None
        inside = None if error else peak * MIB <= predicted
        record(
            out,
            "planner",
            f"{case}: batch {choice.per_gpu} ({'from the memory' if choice.measured else 'the default'}), "
            f"{optimizer}, "
            f"predicted {predicted / MIB:.0f} MiB, measured at {size} px: "
            f"{'torch reserved' if cuda else 'RSS growth'} "
            f"{peak:.0f} MiB, NVML used {fmt(used, '.0f')} MiB: "
            + (error or ("inside the envelope" if inside else "OUTSIDE the envelope")),
            case=case,
            model=key,
            optimizer=optimizer,
            imgsz=imgsz,
            measured_imgsz=size,
            batch=choice.per_gpu,
            reason=choice.reason,
            gpu_state=state,
            predicted_mib=predicted / MIB,
            peak_mib=peak,
            nvml_used_mib=used,
            inside=inside,
            error=error,
            device=str(device),
        )
        del model, opt, batch
        if cuda:
            torch.cuda.empty_cache()
    return 0 if ok else 1


def _nvml_used_mib() -> float | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        used = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).used / MIB
        pynvml.nvmlShutdown()
        return float(used)
    except Exception:  # no NVML: the figure is torch's alone
        return None


# ---------------------------------------------------------------------------------------------
# e) a stop and its resume


def stop(
    out: Path, name: str, rc: int, want: str, rc2: int, stop_log: Path, resumed_log: Path, model: str = ""
) -> int:
    """A run stopped by TERM: exit 143, saved where `want` says (inside the epoch, or before its
    validation); the same command with resume=auto continues there and ends with 0, no traceback."""
    first = stop_log.read_text(errors="replace") if stop_log.is_file() else ""
    second = resumed_log.read_text(errors="replace") if resumed_log.is_file() else ""
    saved = re.findall(r"^INFO trainer: stop: .* continues at (epoch .*) \([0-9.]+ s\)$", first, re.M)
    where = saved[-1] if saved else None
    continued = (
        where is not None and re.search(rf"continuing .* at {re.escape(where)}$", second, re.M) is not None
    )
    crashed = "Traceback" in first or "Traceback" in second
    ok = rc == 143 and where is not None and want in where and rc2 == 0 and continued and not crashed
    last = next(
        (line for line in reversed(second.splitlines()) if line.strip() and not line.startswith("PEAK")), ""
    )
    record(
        out,
        "resume",
        f"{name} {model}: TERM: exit {rc} (want 143), saved at {where or 'nowhere'}; resume=auto: exit "
        f"{rc2}, continued there: {'yes' if continued else 'no'}" + ("" if ok else f"; FAILED: {last[:300]}"),
        stop=name,
        model=model,
        rc=rc,
        where=where,
        resumed_rc=rc2,
        continued=continued,
        traceback=crashed,
        ok=ok,
    )
    return 0 if ok else 1


# ---------------------------------------------------------------------------------------------
# --again


def again(notes: str, parts: Sequence[str]) -> list[str]:
    """The parts to run again, in order: each whose last note is not "ok" (it failed, was cut, or was
    killed while it ran: "started" is its last), or that has none (the call ended before it)."""
    last: dict[str, str] = {}
    for line in notes.splitlines():
        fields = line.split()
        if len(fields) >= 3:
            last[fields[1]] = fields[2]
    return [p for p in parts if last.get(p) != "ok"]


def main(argv: Sequence[str]) -> int:
    command, args = (argv[0], list(argv[1:])) if argv else ("", [])
    if command == "imports" and len(args) == 1:
        return imports(Path(args[0]))
    if command == "env" and len(args) >= 3:
        return env(Path(args[0]), Path(args[1]), args[2], args[3:])
    if command == "stop" and len(args) == 8:
        return stop(
            Path(args[0]), args[1], int(args[2]), args[3], int(args[4]), Path(args[5]), Path(args[6]), args[7]
        )
    if command == "again" and args:
        path = Path(args[0])
        print(" ".join(again(path.read_text() if path.is_file() else "", args[1:])))
        return 0
    if command == "stock-train":
        return stock_train(args)
    if command == "runs" and len(args) == 6:
        return 0 if runs(Path(args[0]), Path(args[1]), int(args[2]), args[3], args[4], args[5]) else 1
    if command == "tail" and len(args) == 2:
        return tail(Path(args[0]), Path(args[1]))
    if command == "levers" and len(args) == 4:
        return levers(Path(args[0]), Path(args[1]), args[2], args[3])
    if command == "planner" and len(args) >= 5:
        return planner(Path(args[0]), args[1], int(args[2]), args[3], args[4:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
