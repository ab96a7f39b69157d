"""Each checkpoint in the folder argv[1]: its epoch (Ultralytics': the last whole one), where rig's
resume continues ([epoch, done batches, batches], or null), early stopping's best epoch and when rig
wrote it (seconds since the epoch, or null), as one JSON line {name: [epoch, where, best_epoch, saved]}."""

import json
import pathlib
import sys

import torch

found = {}
for path in pathlib.Path(sys.argv[1]).glob("*.pt"):
    ckpt = torch.load(path, weights_only=False)
    rig = ckpt.get("rig_resume") or {}
    found[path.name] = [
        ckpt["epoch"],
        [rig["epoch"], rig["done"], rig["batches"]] if rig else None,
        (ckpt.get("stopper") or {}).get("best_epoch"),
        rig.get("saved"),
    ]
print(json.dumps(found))
