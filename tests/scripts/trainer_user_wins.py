"""A user's cache= wins over the image's default in Ultralytics' trainer (needs /datasets/demo)."""

from ultralytics.cfg import DEFAULT_CFG
from ultralytics.models.yolo.detect import DetectionTrainer

t = DetectionTrainer(overrides={"model": "yolo11n.yaml", "data": "/datasets/demo/data.yaml", "cache": "ram"})
d = DetectionTrainer(overrides={"model": "yolo11n.yaml", "data": "/datasets/demo/data.yaml"})
print("USER", t.args.cache, "DEFAULT", d.args.cache, DEFAULT_CFG.cache)
