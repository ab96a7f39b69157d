"""`rig bench`'s table: one row per measure, images/s and what it means."""

from __future__ import annotations

from typing import Any

from rig.observe import cachebench
from rig.observe.bench.realrun import describe
from rig.observe.bench.results import BF16, BenchResult, LeverStep, StepResult, rate


def _lever_row(lever: LeverStep, step: StepResult) -> tuple[str, str, str]:
    label = "  with amp=bf16" if lever.name == BF16 else f"  with {lever.name}"
    if lever.img_s is None or lever.gain is None:
        return label, "-", lever.note or "not measured"
    losses = (
        f"losses within noise ({lever.loss_delta:.2%} <= {step.amp_noise:.2%})"
        if lever.equal
        else f"losses off by {lever.loss_delta:.2%}, beyond the noise {step.amp_noise:.2%}"
    )
    setup = f"; first step +{lever.setup_s:.1f} s" if lever.setup_s >= 1 else ""
    used = "rig train: on" if lever.name in step.chosen else "rig train: off"
    kernels = f"; {lever.note}" if lever.note else ""
    if lever.name == BF16:  # a precision, not a lever: the user's to give
        used = "rig train: yours to give (amp=bf16)"
    return label, rate(lever.img_s), f"{lever.gain:.2f}x eager, {losses}{setup}; {used}{kernels}"


def _optimizer_row(step: StepResult) -> tuple[str, str, str] | None:
    if step.optimizer_step_ms is None or step.optimizer_share is None:
        return None
    every = "every step" if step.accumulate == 1 else f"one every {step.accumulate} steps"
    return (
        f"  optimizer step ({step.optimizer})",
        "-",
        f"{step.optimizer_step_ms:.1f} ms alone, {every}: {step.optimizer_share:.0%} of the train step",
    )


def format_table(res: BenchResult) -> str:
    ld = res.loader
    rows: list[tuple[str, str, str]] = []
    if ld is not None and ld.stock_img_s:
        rows += [
            ("loader, stock Ultralytics", rate(ld.stock_img_s), _kv(ld.stock)),
            ("loader, ours", rate(ld.ours_img_s), f"{_kv(ld.ours)}  ({ld.speedup:.2f}x stock)"),
        ]
    if ld is not None and ld.device_tail_ms_per_image is not None:
        tail = f"{ld.device_tail_ms_per_image:.3f} ms/image on {res.device}, charged to the step"
        if ld.ours_with_tail_img_s is not None:
            rows.append(("loader, ours + device tail", rate(ld.ours_with_tail_img_s), tail))
        else:
            rows.append(("device tail", "-", tail))
        if len(ld.device_tail_parts) > 1:
            for name, ms in ld.device_tail_parts.items():
                rows.append((f"  tail: {name}", "-", f"{ms:.3f} ms/image"))
    batch = f", batch {res.step.batch}" if res.step and res.step.batch else ""
    if res.step_eager_img_s:
        rows.append(
            ("train step (compute ceiling)", rate(res.step_eager_img_s), f"on {res.device}, eager{batch}")
        )
    if res.step is not None and (row := _optimizer_row(res.step)):
        rows.append(row)
    if res.step is not None:
        for lever in res.step.levers:
            rows.append(_lever_row(lever, res.step))
        if res.step.chosen_img_s is not None:
            ratio = res.step.chosen_img_s / res.step_eager_img_s
            rows.append(
                ("  with " + " + ".join(res.step.chosen), rate(res.step.chosen_img_s), f"{ratio:.2f}x eager")
            )
    if ld is not None and ld.device_tail_ms_per_image is not None and res.step_eager_img_s:
        rows.append(
            ("train step + device tail", rate(res.step_img_s), "as training runs it: the tail charged")
        )
    if res.step_compiled_img_s is not None and res.step_eager_img_s:
        ratio = res.step_compiled_img_s / res.step_eager_img_s
        first = f"first step {res.compile_s:.1f} s (compiling, or reading the cache's kernels)"
        rows.append(("train step, compiled", rate(res.step_compiled_img_s), f"{ratio:.2f}x eager; {first}"))
    if res.train:
        rows.append(("real run, ours (rig train)", rate(res.train.img_s), describe(res.train)))
    if res.stock_train:
        versus = f"; ours {res.train.img_s / res.stock_train.img_s:.2f}x" if res.train else ""
        rows.append(
            ("real run, stock yolo train", rate(res.stock_train.img_s), describe(res.stock_train) + versus)
        )
    if res.cache:
        rows += cachebench.format_rows(res.cache)
    width = max((len(r[0]) for r in rows), default=10)
    lines = [f"{'measure':<{width}}  {'img/s':>8}  notes"]
    lines += [f"{a:<{width}}  {b:>8}  {c}" for a, b, c in rows]
    if res.batch_reason:
        lines.append(f"batch: {res.batch} per GPU ({res.batch_reason})")
    lines.append(f"bottleneck: {res.bottleneck} ({res.bottleneck_reason})")
    if res.compile_note:
        lines.append(f"compile: {res.compile_note}")
    if res.levers_record:
        lines.append(f"levers: measured for rig train in {res.levers_record}")
    return "\n".join(lines)


def _kv(d: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in d.items())
