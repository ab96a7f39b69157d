"""A 20-frame clip at /tmp/clip.mp4: a box moving right, for `yolo track`."""

import cv2
import numpy as np

w = cv2.VideoWriter("/tmp/clip.mp4", cv2.VideoWriter_fourcc(*"mp4v"), 10, (320, 240))
for i in range(20):
    f = np.full((240, 320, 3), 90, np.uint8)
    cv2.rectangle(f, (20 + 5 * i, 60), (90 + 5 * i, 160), (0, 200, 255), -1)
    w.write(f)
w.release()
