"""What one checkpoint inside an epoch costs (RIG_CHECKPOINT_EVERY): rig's resumable checkpoint of a
YOLO11n- and a YOLO11x-sized detection model (Ultralytics' save_model, rig's keys added by
rig.yolo.trainer.saves from rig.yolo.resumable.state, written atomically by
rig.launch.checkpoints.write: stream, fsync, rename), against Ultralytics' own save_model of the same
trainer state. Run in the image:

    docker run --rm -v "$PWD/tools:/tools:ro" -v /path/on/the/disk:/out yolo-rig:cu121 \\
        python /tools/checkpoint_cost.py /out

The trainer state is what training holds between two optimizer steps: the model, its EMA, AdamW's
two moments per weight (Ultralytics' optimizer=auto on a short run) and gradients accumulated since
the last step. Prints one line per model: size and seconds, the median of 3 saves.
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import torch
from rig.launch import checkpoints
from rig.yolo import resumable
from rig.yolo.trainer import saves
from ultralytics.cfg import get_cfg
from ultralytics.engine.trainer import BaseTrainer
from ultralytics.nn.tasks import DetectionModel
from ultralytics.utils.torch_utils import EarlyStopping, ModelEMA


def _output_sum(out: object) -> torch.Tensor:
    """Every tensor of a model's output (a tensor, or lists and dicts of them), summed."""
    if isinstance(out, torch.Tensor):
        return out.float().sum()
    values = out.values() if isinstance(out, dict) else out
    return sum((_output_sum(v) for v in values), torch.zeros(()))  # type: ignore[attr-defined]


def _state(cfg: str, folder: Path) -> SimpleNamespace:
    model = DetectionModel(cfg, nc=80, verbose=False)
    model.args = get_cfg()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.zeros(1, 3, 64, 64)
    model.train()
    _output_sum(model(x)).backward()
    optimizer.step()  # AdamW's moments exist
    _output_sum(model(x)).backward()  # gradients accumulated since
    folder.mkdir(parents=True, exist_ok=True)
    return SimpleNamespace(
        model=model,
        ema=ModelEMA(model),
        optimizer=optimizer,
        scaler=torch.cuda.amp.GradScaler(enabled=False),
        stopper=EarlyStopping(),
        best_fitness=0.5,
        fitness=0.5,
        metrics={},
        args=get_cfg(),
        train_loader=[None] * 1000,
        csv=folder / "results.csv",
        read_results_csv=lambda: {},
        loss_names=("box", "cls", "dfl"),
        loss_items=None,
        loss=None,
        epoch=3,
        save_period=-1,
        wdir=folder,
        last=folder / "last.pt",
        best=folder / "best.pt",
    )


def _seconds(work: Callable[[], object]) -> float:
    times = []
    for _ in range(3):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _rig(t: SimpleNamespace) -> None:
    writes = saves.Writes(checkpoints.write)
    paths = saves.path_type(writes)
    t.wdir, t.last, t.best = paths(t.wdir), paths(t.last), paths(t.best)
    state = functools.partial(resumable.state, t, 3, 500, 3 * 1000 + 480, None, model=t.model)
    with writes.extending(resumable.stock_epoch(3), state, only=t.last):
        BaseTrainer.save_model(t)


def main(out: Path) -> int:
    torch.set_num_threads(max(1, torch.get_num_threads()))
    for name in ("yolo11n.yaml", "yolo11x.yaml"):
        t = _state(name, out / name.removesuffix(".yaml"))
        params = sum(p.numel() for p in t.model.parameters())
        rig_s = _seconds(functools.partial(_rig, t))
        rig_mb = t.last.stat().st_size / 1e6
        stock = out / f"{name}.stock.pt"
        t.wdir, t.last, t.fitness = (
            out,
            stock,
            0.4,
        )  # not the best: last.pt alone, as rig's periodic checkpoint
        stock_s = _seconds(functools.partial(BaseTrainer.save_model, t))
        print(
            f"{name.removesuffix('.yaml')}: {params / 1e6:.1f}M parameters; rig's checkpoint "
            f"{rig_mb:.0f} MB in {rig_s:.2f} s (build, write, fsync, rename); Ultralytics' save_model "
            f"{stock.stat().st_size / 1e6:.0f} MB in {stock_s:.2f} s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/ckpt-cost")))
