"""Whether two checkpoints (argv[1], argv[2]) hold the same weights bit for bit: their model and EMA
tensors, and rig's own fp32 weights and EMA where both have them. One JSON line {part: [differing,
total]}."""

import json
import sys

import torch

a, b = (torch.load(p, map_location="cpu", weights_only=False) for p in sys.argv[1:3])
out = {}
for part in ("model", "ema"):
    if a.get(part) is None or b.get(part) is None:
        continue
    sa, sb = a[part].state_dict(), b[part].state_dict()
    assert sa.keys() == sb.keys(), part
    out[part] = [sum(not torch.equal(sa[k], sb[k]) for k in sa), len(sa)]
ra, rb = a.get("rig_resume") or {}, b.get("rig_resume") or {}
for part in ("model", "ema"):
    if ra.get(part) is not None and rb.get(part) is not None:
        ma, mb = ra[part], rb[part]
        out[f"rig_resume.{part}"] = [sum(not torch.equal(ma[k], mb[k]) for k in ma), len(ma)]
print(json.dumps(out))
