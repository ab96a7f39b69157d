"""rig.yolo.export.compare flags an error of 1 % of a channel's scale and passes round-off."""

import numpy as np
from rig.yolo.export import compare

ref = np.zeros((1, 6, 84), dtype=np.float32)
ref[:, :4] = 640.0 * np.random.default_rng(0).random((1, 4, 84))
ref[:, 4:] = np.random.default_rng(1).random((1, 2, 84))
ok = compare([(ref, ref + 1e-4)], images=1)
assert ok.within(1e-3), ok
boxes_off = ref.copy()
boxes_off[0, 0, 0] += 6.4  # 1 % of 640 px
assert not compare([(ref, boxes_off)], images=1).within(1e-3)
scores_off = ref.copy()
scores_off[0, 5, 3] += 0.01  # a score off by 0.01
bad = compare([(ref, scores_off)], images=1)
assert not bad.within(1e-3) and abs(bad.max_abs - 0.01) < 1e-6, bad
nan = ref.copy()
nan[0, 0, 0] = np.nan
assert not compare([(ref, nan)], images=1).within(1e-3)
print("COMPARE OK")
