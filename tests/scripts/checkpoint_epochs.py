"""Each checkpoint in the folder argv[1]: its epoch, whether a stop mid-epoch saved it, and early
stopping's best epoch, as one JSON line {name: [epoch, stopped, best_epoch]}."""

import json
import pathlib
import sys

import torch

found = {}
for path in pathlib.Path(sys.argv[1]).glob("*.pt"):
    ckpt = torch.load(path, weights_only=False)
    found[path.name] = [
        ckpt["epoch"],
        "rig/stopped_mid_epoch" in (ckpt["train_metrics"] or {}),
        (ckpt.get("stopper") or {}).get("best_epoch"),
    ]
print(json.dumps(found))
