"""The image's overlay of Ultralytics defaults: every key exists upstream and reaches DEFAULT_CFG."""

from pathlib import Path

import yaml
from ultralytics.cfg import DEFAULT_CFG, get_cfg

ours = yaml.safe_load(Path("/opt/rig/configs/ultralytics.yaml").read_text()) or {}
upstream = yaml.safe_load(Path("/opt/rig/configs/upstream.yaml").read_text()) or {}
assert set(ours) == set(upstream), (ours, upstream)  # the build recorded every key upstream had
assert DEFAULT_CFG.cache is False, DEFAULT_CFG.cache  # plain yolo: Ultralytics' stock cache
for k, v in ours.items():
    assert getattr(DEFAULT_CFG, k) == v, (k, getattr(DEFAULT_CFG, k), v)
    assert upstream[k] != v, f"{k}: the overlay repeats the upstream value"
    assert getattr(get_cfg(overrides={k: upstream[k]}), k) == upstream[k]  # a user argument wins
print("OK", sorted(ours))
