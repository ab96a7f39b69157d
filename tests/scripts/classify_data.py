"""A classification set of 12 MP images in /tmp/cls: 24 train, 4 val, two classes."""

from pathlib import Path

import cv2
import numpy as np

for split, n in (("train", 12), ("val", 2)):
    for cls in ("a", "b"):
        d = Path("/tmp/cls") / split / cls
        d.mkdir(parents=True)
        for i in range(n):  # 4000x3000: 36 MB each decoded, what Ultralytics' cache=ram would hold
            cv2.imwrite(str(d / f"{i}.png"), np.full((3000, 4000, 3), 40 * i % 255, np.uint8))
