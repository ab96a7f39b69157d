"""Each checkpoint in the folder argv[1]: the EMA's updates (the optimizer's steps so far), the dtype
of Ultralytics' EMA (its `ema` key) and of rig's (its resume state's, None without one), as one JSON
line {name: [updates, dtype, rig's dtype]}."""

import json
import pathlib
import sys

import torch

found = {}
for path in pathlib.Path(sys.argv[1]).glob("*.pt"):
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    ema = ckpt.get("ema")
    rig = (ckpt.get("rig_resume") or {}).get("ema")
    found[path.name] = [
        ckpt.get("updates"),
        str(next(ema.parameters()).dtype) if ema is not None else None,
        str(next(v for v in rig.values() if v.is_floating_point()).dtype) if rig else None,
    ]
print(json.dumps(found))
