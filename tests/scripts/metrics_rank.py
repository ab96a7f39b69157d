"""One rank's metrics without Ultralytics: `python metrics_rank.py EPOCHS SHARD BATCH`, RANK from the env.

Drives rig.instrument.metrics' callbacks as Ultralytics' trainer calls them, with a trainer of plain
attributes: SHARD images a rank per epoch in batches of BATCH, 2 ms of loader wait and 3 ms of
step a batch. prometheus-client reads PROMETHEUS_MULTIPROC_DIR from the environment it was given.
"""

import sys
import time
from pathlib import Path
from types import SimpleNamespace

from rig.instrument import metrics


class Loader:
    def __init__(self, shard: int, batch: int) -> None:
        self.batch_size, self.sampler = batch, range(shard)

    def __len__(self) -> int:
        return -(-len(self.sampler) // self.batch_size)


def main() -> None:
    epochs, shard, batch = (int(a) for a in sys.argv[1:4])
    model = SimpleNamespace(callbacks={})
    model.add_callback = lambda event, cb: model.callbacks.setdefault(event, []).append(cb)
    assert metrics.attach(model) is not None, "no metrics directory in the environment"
    trainer = SimpleNamespace(
        args=SimpleNamespace(model="/w/yolo11n.pt", data="/d/coco8.yaml"),
        save_dir=Path("/runs/detect/train-7"), world_size=2, epochs=epochs, start_epoch=0,
        train_loader=Loader(shard, batch), tloss=None, metrics={},
        optimizer=SimpleNamespace(param_groups=[{"lr": 0.01}, {"lr": 0.02}]),
    )  # fmt: skip

    def run(event: str) -> None:
        for cb in model.callbacks.get(event, []):
            cb(trainer)

    run("on_train_start")  # before the first epoch Ultralytics' trainer has no `epoch` yet
    for epoch in range(epochs):
        trainer.epoch = epoch
        run("on_train_epoch_start")
        for i in range(len(trainer.train_loader)):
            time.sleep(0.002)
            run("on_train_batch_start")
            time.sleep(0.003)
            trainer.tloss = {"box_loss": 1.5 - 0.1 * i, "cls_loss": 2.5, "dfl_loss": 1.25}
            run("on_train_batch_end")
        trainer.metrics = {"metrics/mAP50(B)": 0.5, "metrics/mAP50-95(B)": 0.25,
                           "metrics/precision(B)": 0.75, "metrics/recall(B)": 0.625}  # fmt: skip
        run("on_model_save")
        run("on_fit_epoch_end")
    run("on_train_end")
    print("done", flush=True)
    sys.stdin.read()  # a lone trainer serves its own /metrics: until the test has read them


if __name__ == "__main__":
    main()
