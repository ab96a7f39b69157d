"""sync_bn on the CPU, on the trainer's own model: rig's trainer (DetectionTrainer-based) on the demo data,
its world size set to 2 as under DDP (converting needs no process group; a step would, on GPUs).
Prints what test_speed.py checks: the model's BatchNorm layers, the EMA's, the checkpoint's, a fine-tune."""

import os

os.environ["RIG_SYNC_BN"] = "1"  # what `rig train sync_bn=True` sets with more than one rank

import torch
from rig import log
from rig.launch import trainer as rig_trainer
from torch import nn
from ultralytics import YOLO
from ultralytics.models.yolo.detect import DetectionTrainer
from ultralytics.utils.torch_utils import EarlyStopping, ModelEMA


def kinds(model: nn.Module) -> list[str]:
    return sorted(
        {type(m).__name__ for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)}
    )


log.setup()  # as the trainer's main does: rig's INFO lines on stderr
args = {"data": "/tmp/demo/data.yaml", "model": "yolo11n.yaml", "epochs": 1, "imgsz": 64, "device": "cpu"}
t = rig_trainer.rig_trainer_class(DetectionTrainer)(
    overrides={
        **args,
        "project": "/tmp/runs",
        "name": "sync",
        "exist_ok": True,
        "plots": False,
        "compile": True,
    }
)
t.world_size = 2
t.setup_model()  # what _setup_train does, up to set_model_attributes
t.model = t.model.to(t.device)
before = {k: v.clone() for k, v in t.model.state_dict().items()}
layers = sum(type(m) is nn.BatchNorm2d for m in t.model.modules())
t.set_model_attributes()
after = t.model.state_dict()
kept = before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
print("MODEL", layers, kinds(t.model), kept, t.model.names == t.data["names"])

t.ema = ModelEMA(t.model)  # as _setup_train makes it, after the DDP wrap
print("EMA-MADE", kinds(t.ema.ema))
t.run_callbacks("on_pretrain_routine_end")
print("EMA", kinds(t.ema.ema), all(torch.equal(v, after[k]) for k, v in t.ema.ema.state_dict().items()))
t.ema.update(t.model)  # the EMA's tensors still pair with the model's by name

t.epoch, t.best_fitness, t.stopper, t.metrics, t.fitness = 0, None, EarlyStopping(), {}, None
t.optimizer = torch.optim.SGD(t.model.parameters(), lr=0.01)
t.scaler = torch.cuda.amp.GradScaler(enabled=False)
t.train_loader = [None] * 4  # what _setup_train builds: a checkpoint records the epoch's batches
t.save_model()
print("CKPT", kinds(torch.load(t.last, map_location="cpu", weights_only=False)["ema"]))

# freeze=2, as _setup_train names the frozen layers: their norms stay in eval, the others train.
t.freeze_layer_names = ["model.0.", "model.1.", ".dfl"]
t._model_train()
frozen = [
    m.training
    for n, m in t.model.named_modules()
    if isinstance(m, nn.SyncBatchNorm) and n.startswith(("model.0.", "model.1."))
]
others = [
    m.training
    for n, m in t.model.named_modules()
    if isinstance(m, nn.SyncBatchNorm) and n.startswith("model.2.")
]
print("FROZEN", len(frozen), "training:", sum(frozen), "others training:", all(others) and bool(others))

# NaN recovery (and resume) load last.pt through _load_checkpoint_state, which makes a new EMA from the model.
t._load_checkpoint_state(torch.load(t.last, map_location="cpu", weights_only=False))
print("RECOVERED-EMA", kinds(t.ema.ema))
t.epoch = 1
t.save_model()
print("RECOVERED-CKPT", kinds(torch.load(t.last, map_location="cpu", weights_only=False)["ema"]))
YOLO(str(t.last)).train(**args, project="/tmp/runs", name="tune", plots=False, val=False)
print("FINETUNED")
