"""Each checkpoint in the folder argv[1]: the EMA's updates (the optimizer's steps so far) and the
dtype of its weights, as one JSON line {name: [updates, dtype]}."""

import json
import pathlib
import sys

import torch

found = {}
for path in pathlib.Path(sys.argv[1]).glob("*.pt"):
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    ema = ckpt.get("ema")
    found[path.name] = [ckpt.get("updates"), str(next(ema.parameters()).dtype) if ema is not None else None]
print(json.dumps(found))
