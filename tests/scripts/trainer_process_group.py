"""The arguments rig's trainer hands init_process_group (recorded, no real group)."""

import os
import types

import torch
import torch.distributed as dist
from rig.launch import trainer
from ultralytics.models.yolo.detect import DetectionTrainer

calls = []
dist.init_process_group = lambda **kw: calls.append(kw)
cls = trainer.rig_trainer_class(DetectionTrainer)
t = cls.__new__(cls)
t.args = types.SimpleNamespace(device="0,2")
t.world_size = 4
t.device = torch.device("cpu")  # as Ultralytics' __init__ leaves it on this GPU-less box
cls._setup_ddp(t)
kw = calls[0]
print(
    "DDP",
    kw["backend"],
    int(kw["timeout"].total_seconds()),
    kw["rank"],
    kw["world_size"],
    os.environ.get("TORCH_NCCL_BLOCKING_WAIT"),
    os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING"),
)
