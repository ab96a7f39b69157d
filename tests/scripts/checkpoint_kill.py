"""A SIGKILL in the middle of a save of rig's trainer (its save_model: Ultralytics' checkpoint with
rig's resumable state), in the image.

`child`: rig's trainer (DetectionTrainer-based) on the demo data saves last.pt, best.pt and epochN.pt
with its save_model, epoch after epoch, printing SAVED after each.
`parent` (the default): starts the child, waits for one whole save, then kills it with SIGKILL as soon
as a save is under way (its temporary file in weights/, or a checkpoint seen shorter than the last
whole one), and prints what it saw: whether a checkpoint was ever seen half-written, and whether
last.pt and best.pt load after the kill. test_multigpu.py checks the lines.
"""

import signal
import subprocess
import sys
import time
from pathlib import Path

WDIR = Path("/tmp/runs/kill/weights")


def child() -> None:
    import torch
    from rig.launch import trainer as rig_trainer
    from ultralytics.models.yolo.detect import DetectionTrainer
    from ultralytics.utils.torch_utils import EarlyStopping, ModelEMA

    args = {"data": "/tmp/demo/data.yaml", "model": "yolo11n.yaml", "epochs": 1, "imgsz": 64, "device": "cpu"}
    t = rig_trainer.rig_trainer_class(DetectionTrainer)(
        overrides={**args, "project": "/tmp/runs", "name": "kill", "exist_ok": True, "plots": False}
    )
    t.setup_model()
    t.set_model_attributes()
    t.ema = ModelEMA(t.model)
    t.epoch, t.best_fitness, t.stopper, t.metrics, t.fitness = 0, 0.5, EarlyStopping(), {}, 0.5
    t.optimizer = torch.optim.SGD(t.model.parameters(), lr=0.01)
    t.scaler = torch.cuda.amp.GradScaler(enabled=False)
    t.train_loader, t.save_period = [None] * 4, 1  # what the position is counted in; epochN.pt too
    while True:
        t.save_model()
        print("SAVED", t.epoch, flush=True)
        t.epoch += 1


def parent() -> int:
    import torch

    log = Path("/tmp/child.log")
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, __file__, "child"], stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while "SAVED 0" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    if "SAVED 0" not in log.read_text():  # the old checkpoint: one whole save
        proc.kill()
        print("CHILD-FAILED", log.read_text()[-2000:], flush=True)
        return 1
    whole = (WDIR / "last.pt").stat().st_size
    partial, killed_while = [], ""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        # last.pt's or best.pt's write (epochN.pt's is as atomic, but the test is about the two kept)
        tmp = [p.name for p in WDIR.glob(".*.tmp") if p.name.startswith((".last.pt.", ".best.pt."))]
        for p in WDIR.glob("*.pt"):
            try:
                size = p.stat().st_size
            except FileNotFoundError:
                continue
            if size < whole // 2:  # a truncated write (a whole one differs by a few bytes at most)
                partial.append(f"{p.name}:{size}")
        if tmp or partial:
            proc.send_signal(signal.SIGKILL)
            killed_while = "temporary file " + ",".join(tmp) if tmp else "partial " + ",".join(partial)
            break
    proc.kill()
    proc.wait()
    print(
        "KILLED", proc.returncode == -signal.SIGKILL, "while", killed_while or "nothing (timeout)", flush=True
    )
    print("SEEN-PARTIAL", partial, flush=True)
    for name in ("last.pt", "best.pt"):
        try:
            ckpt = torch.load(WDIR / name, map_location="cpu", weights_only=False)
            print("LOADS", name, "epoch", ckpt["epoch"], flush=True)
        except Exception as e:
            print("BROKEN", name, type(e).__name__, str(e)[:200], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(child() if sys.argv[1:] == ["child"] else parent())
