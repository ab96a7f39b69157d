"""rig.yolo.ultra's copies of Ultralytics' data rules match Ultralytics' own (needs /datasets/demo)."""

from rig.yolo import datasets, overlay, ultra
from ultralytics.data.utils import IMG_FORMATS, check_det_dataset
from ultralytics.utils import DEFAULT_CFG_DICT, SETTINGS

assert ultra.image_formats() == frozenset(IMG_FORMATS) == ultra.IMG_FORMATS_FALLBACK
stock = {k: overlay.upstream_values().get(k, DEFAULT_CFG_DICT[k]) for k in ("imgsz", "batch")}
assert stock == {"imgsz": ultra.DEFAULT_IMGSZ, "batch": ultra.DEFAULT_BATCH}, stock
dirs = ultra.settings_dirs()
assert {k: str(v) for k, v in dirs.items()} == {k: SETTINGS[k] for k in dirs}, (dirs, SETTINGS)
assert ultra.smart_value("[640,480]") == [640, 480] and ultra.smart_value("0.5") == 0.5
root = datasets.Path("/datasets")
spec = datasets.load(datasets.locate("demo/data.yaml", root), root)
assert [str(p) for p in spec.train] == [check_det_dataset("/datasets/demo/data.yaml")["train"]], spec
print("OK")
