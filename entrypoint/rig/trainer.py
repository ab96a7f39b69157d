"""What each rank runs: `python -m rig.trainer key=value ...` -> YOLO(model).train(**args).

Under torchrun, Ultralytics takes its world size from `device` (the GPUs of this node); across
nodes that is wrong, so the trainer class is extended to use torchrun's global WORLD_SIZE (its
RANK already is global). SIGTERM only sets a flag; the ranks agree on it between batches and stop
the Ultralytics way, so rank 0 writes `last.pt` for the interrupted epoch and `resume=True` goes on.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any

from rig import log

_logger = log.get("trainer")
STOPPED_EXIT = 128 + signal.SIGTERM


class _StopFlag:
    """Set by the signal handler, read by the training loop: handlers never act themselves."""

    def __init__(self) -> None:
        self.signum = 0

    def handler(self, signum: int, _frame: FrameType | None) -> None:
        self.signum = signum


STOP = _StopFlag()


def parse_value(text: str) -> Any:
    """Ultralytics' own CLI typing: 'True' -> True, '16' -> 16, '0.5' -> 0.5, 'none' -> None."""
    lowered = text.lower()
    if lowered == "none":
        return None
    if lowered in {"true", "false"}:
        return lowered == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


# Names and paths stay strings: name=2024 is a directory, not a number.
_STRING_KEYS = frozenset({"name", "project", "data", "model", "device", "tracker", "cfg"})


def parse_args(argv: Sequence[str]) -> dict[str, Any]:
    args: dict[str, Any] = {}
    for item in argv:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"ERROR trainer: expected key=value, got {item!r}")
        args[key] = value if key in _STRING_KEYS else parse_value(value)
    return args


def _global_world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def _stop_agreed(trainer: Any) -> bool:
    """True on every rank once any rank got SIGTERM (one tiny all-reduce per batch under DDP)."""
    torch: Any = importlib.import_module("torch")
    dist: Any = importlib.import_module("torch.distributed")

    local = 1 if STOP.signum else 0
    if not (dist.is_available() and dist.is_initialized()):
        return bool(local)
    flag = torch.tensor([local], device=trainer.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def _on_batch_end(trainer: Any) -> None:
    if not trainer.stop and _stop_agreed(trainer):
        trainer.stop = True
        trainer.rig_stopping = True
        _logger.info("stop requested: finishing this batch and saving last.pt")


def rig_trainer_class(base: type) -> type:
    """base (the task's Ultralytics trainer) with rig's global world size and clean SIGTERM stop."""

    class RigTrainer(base):  # type: ignore[misc]
        rig_stopping = False

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            world = _global_world_size()
            # Ultralytics counted only this node's `device` list (0 means CPU: never DDP).
            if world > 1 and int(getattr(self, "world_size", 0)) >= 1:
                self.world_size = world
            self.add_callback("on_train_batch_end", _on_batch_end)

        def validate(self) -> Any:
            if self.rig_stopping:  # a SIGTERM grace period is too short for a validation pass
                return self.metrics, self.fitness
            return super().validate()

        def final_eval(self) -> Any:
            if self.rig_stopping:
                return None
            return super().final_eval()

    return RigTrainer


def _attach_telemetry(model: Any, run_dir: str | None) -> None:
    try:
        telemetry = importlib.import_module("rig.telemetry")
    except ImportError:
        _logger.info("telemetry is not in this image; training without it")
        return
    telemetry.attach(model, run_dir or None)


def main(argv: Sequence[str] | None = None) -> int:
    log.setup()
    signal.signal(signal.SIGTERM, STOP.handler)
    args = parse_args(sys.argv[1:] if argv is None else argv)
    yolo: Any = importlib.import_module("ultralytics").YOLO
    model = yolo(args.pop("model", "yolo11n.pt"))
    rank = int(os.environ.get("RANK", "0"))
    if rank == 0:
        _attach_telemetry(model, os.environ.get("RIG_RUN_DIR"))
    trainer_cls = rig_trainer_class(model.task_map[model.task]["trainer"])
    model.train(trainer=trainer_cls, **args)
    if STOP.signum:
        last = getattr(model.trainer, "last", None)
        if rank == 0:
            _logger.info(
                "stopped by signal %d; kept %s; continue with: resume=True model=%s", STOP.signum, last, last
            )
        return STOPPED_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())
