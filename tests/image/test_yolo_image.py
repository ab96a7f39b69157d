"""The fast path inside the image: baked defaults, offline train/val/predict/export, demo data, bench."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

pytestmark = pytest.mark.image

# Help links Ultralytics prints, docs and the Netron viewer (never fetched), and the local
# TensorBoard its callback names (tensorboard=True in the image's settings); any other URL in a
# log means it tried the network.
_ALLOWED_URL = re.compile(r"https://(docs\.ultralytics\.com/\S*|netron\.app)|http://localhost:6006/")
_URL = re.compile(r"\b(?:https?|ftp)://\S+")
_NETWORK_WORDS = re.compile(
    r"download|may be offline|retrying|github\.com|urlopen|connectionerror", re.IGNORECASE
)


def assert_no_network_attempt(logs: str) -> None:
    urls = [u for u in _URL.findall(logs) if not _ALLOWED_URL.match(u)]
    assert not urls, f"URLs in the logs (a download attempt?): {urls[:5]}"
    words = sorted({m.group(0).lower() for m in _NETWORK_WORDS.finditer(logs)})
    assert not words, f"network words in the logs: {words}\n{logs[-3000:]}"


def py(code: str) -> list[str]:
    return ["python", "-c", code]


def test_overlay_keys_exist_upstream_and_reach_default_cfg(containers: Any) -> None:
    code = """
import yaml
from ultralytics.cfg import DEFAULT_CFG, get_cfg
ours = yaml.safe_load(open('/opt/rig/configs/ultralytics.yaml')) or {}
upstream = yaml.safe_load(open('/opt/rig/configs/upstream.yaml')) or {}
assert set(ours) == set(upstream), (ours, upstream)  # the build recorded every key upstream had
assert DEFAULT_CFG.cache is False, DEFAULT_CFG.cache  # plain yolo: Ultralytics' stock cache
for k, v in ours.items():
    assert getattr(DEFAULT_CFG, k) == v, (k, getattr(DEFAULT_CFG, k), v)
    assert upstream[k] != v, f'{k}: the overlay repeats the upstream value'
    assert getattr(get_cfg(overrides={k: upstream[k]}), k) == upstream[k]  # a user argument wins
print('OK', sorted(ours))
"""
    rc, logs = containers.oneshot(py(code), timeout=120, network_mode="none")
    assert rc == 0, logs
    assert "OK" in logs


def test_rig_reads_data_yamls_with_ultralytics_own_rules(containers: Any) -> None:
    # rig.yolo.ultra uses Ultralytics' own IMG_FORMATS, settings and smart_value in the image; its
    # copies for hosts without Ultralytics must match them.
    code = """
from ultralytics.data.utils import IMG_FORMATS, check_det_dataset
from ultralytics.utils import DEFAULT_CFG_DICT, SETTINGS
from rig.yolo import datasets, overlay, ultra
assert ultra.image_formats() == frozenset(IMG_FORMATS) == ultra.IMG_FORMATS_FALLBACK
stock = {k: overlay.upstream_values().get(k, DEFAULT_CFG_DICT[k]) for k in ('imgsz', 'batch')}
assert stock == {'imgsz': ultra.DEFAULT_IMGSZ, 'batch': ultra.DEFAULT_BATCH}, stock
dirs = ultra.settings_dirs()
assert {k: str(v) for k, v in dirs.items()} == {k: SETTINGS[k] for k in dirs}, (dirs, SETTINGS)
assert ultra.smart_value('[640,480]') == [640, 480] and ultra.smart_value('0.5') == 0.5
root = datasets.Path('/datasets')
spec = datasets.load(datasets.locate('demo/data.yaml', root), root)
assert [str(p) for p in spec.train] == [check_det_dataset('/datasets/demo/data.yaml')['train']], spec
print('OK')
"""
    demo = "rig demo-data /datasets/demo --train 4 --val 2 --imgsz 64 >/dev/null"
    cmd = f'{demo} && cd /datasets && python -c "{code}"'
    rc, logs = containers.oneshot(["bash", "-c", cmd], timeout=120, network_mode="none")
    assert rc == 0 and "OK" in logs, logs


def test_trainer_types_arguments_with_ultralytics_smart_value(containers: Any) -> None:
    code = """
from rig.launch.trainer import parse_args
argv = ['epochs=3', 'lr0=0.5', 'resume=True', 'name=2024', 'cache=none', 'device=0', 'imgsz=[640,480]']
got = parse_args(argv)
want = dict(epochs=3, lr0=0.5, resume=True, name='2024', cache=None, device='0', imgsz=[640, 480])
assert got == want, got
print('OK')
"""
    rc, logs = containers.oneshot(py(code), timeout=120, network_mode="none")
    assert rc == 0 and "OK" in logs, logs


def test_user_argument_wins_in_the_trainer(containers: Any) -> None:
    code = """
from ultralytics.models.yolo.detect import DetectionTrainer
from ultralytics.cfg import DEFAULT_CFG
t = DetectionTrainer(overrides={'model': 'yolo11n.yaml', 'data': '/datasets/demo/data.yaml', 'cache': 'ram'})
d = DetectionTrainer(overrides={'model': 'yolo11n.yaml', 'data': '/datasets/demo/data.yaml'})
print('USER', t.args.cache, 'DEFAULT', d.args.cache, DEFAULT_CFG.cache)
"""
    cmd = f'rig demo-data /datasets/demo --train 4 --val 2 --imgsz 64 >/dev/null && python -c "{code}"'
    rc, logs = containers.oneshot(["bash", "-c", cmd], timeout=120, network_mode="none")
    assert rc == 0, logs
    assert "USER ram DEFAULT False False" in logs


OFFLINE_SCRIPT = r"""
set -euo pipefail
cd /workspace
rig demo-data /datasets/demo --train 16 --val 8 --imgsz 160
ARGS="imgsz=160 batch=8 workers=1 exist_ok=True"
rig yolo train model=yolo11n.yaml data=/datasets/demo/data.yaml epochs=1 name=off $ARGS
W=/workspace/runs/detect/off/weights/best.pt
test -f "$W"
grep -q '^cache: false' /workspace/runs/detect/off/args.yaml  # plain yolo: Ultralytics' default
rig yolo val model=$W data=/datasets/demo/data.yaml imgsz=160 batch=8 name=offval exist_ok=True
rig yolo predict model=$W source=/datasets/demo/images/val imgsz=160 name=offpred exist_ok=True
rig yolo export model=$W format=onnx imgsz=160
test -s /workspace/runs/detect/off/weights/best.onnx
echo ALL-STEPS-DONE
"""


def test_offline_train_val_predict_export(containers: Any) -> None:
    rc, logs = containers.oneshot(
        ["bash", "-c", OFFLINE_SCRIPT], timeout=420, network_mode="none", shm_size="512m"
    )
    assert rc == 0, logs[-4000:]
    assert "ALL-STEPS-DONE" in logs
    assert_no_network_attempt(logs)


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        ("predict model=yolo11s.pt source=/tmp", "put the file at /weights/yolo11s.pt"),
        ("train model=yolo11n.yaml data=coco8.yaml", "put the dataset under /datasets/coco8"),
    ],
)
def test_missing_weight_or_dataset_is_one_line(containers: Any, args: str, expect: str) -> None:
    rc, logs = containers.oneshot(["rig", "yolo", *args.split()], timeout=60, network_mode="none")
    assert rc == 1
    lines = [line for line in logs.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ERROR rig: "), logs
    assert expect in lines[0]


def test_settings_and_fonts_for_any_uid(containers: Any) -> None:
    # An arbitrary uid without a passwd entry: settings read as baked, fonts local, DDP dir writable.
    code = """
from ultralytics.utils import SETTINGS, USER_CONFIG_DIR
from ultralytics.utils.checks import check_font
assert SETTINGS['datasets_dir'] == '/datasets' and SETTINGS['weights_dir'] == '/weights', dict(SETTINGS)
assert SETTINGS['runs_dir'] == '/workspace/runs' and SETTINGS['sync'] is False, dict(SETTINGS)
for f in ('Arial.ttf', 'Arial.Unicode.ttf'):
    p = check_font(f)
    assert p is not None and p.resolve().is_file(), f
(USER_CONFIG_DIR / 'DDP').mkdir(exist_ok=True)
print('SETTINGS-OK')
"""
    rc, logs = containers.oneshot(py(code), timeout=120, network_mode="none", user="4321:4321", entrypoint=[])
    assert rc == 0, logs
    assert "SETTINGS-OK" in logs
    assert_no_network_attempt(logs)


def test_demo_data_is_deterministic(containers: Any) -> None:
    cmd = """
for s in a:3 b:3 c:4; do rig demo-data /tmp/${s%:*} --train 6 --val 2 --imgsz 96 --seed ${s#*:} >/dev/null
done
for d in a b c; do echo SUM $(cd /tmp/$d && find images labels -type f | sort | xargs cat | md5sum); done
echo COUNT $(ls /tmp/a/images/train | wc -l)
sed 's/^/LABEL /' /tmp/a/labels/*/*.txt
"""
    rc, logs = containers.oneshot(["bash", "-c", cmd], timeout=60, network_mode="none")
    assert rc == 0, logs
    sums = re.findall(r"^SUM (\S+)", logs, re.MULTILINE)
    assert len(sums) == 3 and sums[0] == sums[1] != sums[2], logs
    assert re.search(r"^COUNT 6$", logs, re.MULTILINE), logs
    labels = re.findall(r"^LABEL (.*)$", logs, re.MULTILINE)
    assert len(labels) >= 8  # at least one object in each of the 8 images
    for line in labels:
        cls, *box = line.split()
        assert 0 <= int(cls) < 5 and len(box) == 4 and all(0 < float(v) <= 1 for v in box), line


def test_bench_quick_on_cpu_writes_json(containers: Any) -> None:
    # --compile has its own test (test_speed.py): compiling YOLO11n at 320 px takes minutes here.
    cmd = (
        "rig bench --quick --imgsz 320 --train-images 96 --source-size 640x360"
        " --json /tmp/b.json >&2 && cat /tmp/b.json"
    )
    rc, logs = containers.oneshot(["bash", "-c", cmd], timeout=300, network_mode="none", shm_size="1g")
    assert rc == 0, logs[-3000:]
    res = json.loads(logs[logs.rindex('{\n  "loader"') :])
    assert res["loader"]["stock_img_s"] > 0 and res["loader"]["ours_img_s"] > 0 and res["step_img_s"] > 0
    assert res["bottleneck"] in {"loader", "compute"} and res["bottleneck_reason"]
    assert res["loader"]["ours"]["cache"] == "ram" and res["loader"]["stock"]["cache"] is False
    assert res["compile_used"] is False and res["step_compiled_img_s"] is None
    assert "bottleneck:" in logs


def test_demo_data_is_idempotent_and_never_clobbers(containers: Any) -> None:
    cmd = """
D="--train 2 --val 1 --imgsz 64"
rig demo-data /tmp/d $D && rig demo-data /tmp/d $D && echo SAME-OK
rig demo-data /tmp/d --train 3 --val 1 --imgsz 64; echo "DIFFERENT-RC $?"
mkdir -p /tmp/mine && touch /tmp/mine/keep
rig demo-data /tmp/mine --force; echo "MINE-RC $? $(ls /tmp/mine)"
"""
    rc, logs = containers.oneshot(["bash", "-c", cmd], timeout=60, network_mode="none")
    assert rc == 0, logs
    assert "SAME-OK" in logs and "already holds this demo dataset" in logs
    assert "DIFFERENT-RC 1" in logs and "pass --force to replace it" in logs
    assert "MINE-RC 1 keep" in logs and "not made by rig demo-data" in logs


MOVED_SCRIPT = """
set -eo pipefail
rig demo-data /tmp/made --train 4 --val 2 --imgsz 64 >/dev/null
echo "PATH-LINES $(grep -c '^path:' /tmp/made/data.yaml || true)"
mv /tmp/made /tmp/moved
CPU="device=cpu imgsz=64 batch=4 workers=0 plots=False exist_ok=True"
rig train model=yolo11n.yaml data=/tmp/moved/data.yaml epochs=1 name=moved $CPU >/tmp/train.log 2>&1
echo TRAIN-OK
# A set written before demo-data stopped naming its folder: path: the container it was made in.
{ echo 'path: /datasets/made-elsewhere'; cat /tmp/moved/data.yaml; } >/tmp/moved/old.yaml
rig yolo val model=/workspace/runs/detect/moved/weights/best.pt data=/tmp/moved/old.yaml $CPU 2>&1 \
  | grep -E '^(INFO|WARNING|ERROR) ' | sed 's/^/VAL /'
mkdir /tmp/empty && cp /tmp/moved/old.yaml /tmp/empty/data.yaml
rc=0; rig train model=yolo11n.yaml data=/tmp/empty/data.yaml epochs=1 $CPU >/tmp/wrong.log 2>&1 || rc=$?
echo "WRONG-RC $rc"; sed 's/^/WRONG-LOG /' /tmp/wrong.log
"""


def test_a_dataset_moved_to_another_path_trains_and_validates(containers: Any) -> None:
    rc, logs = containers.oneshot(
        ["bash", "-c", MOVED_SCRIPT], timeout=420, network_mode="none", shm_size="512m"
    )
    assert rc == 0, logs[-4000:]
    assert "PATH-LINES 0" in logs and "TRAIN-OK" in logs, logs[-4000:]  # demo-data names no folder
    val = [line.removeprefix("VAL ") for line in logs.splitlines() if line.startswith("VAL ")]
    assert [line for line in val if "does not exist" in line] == [
        "INFO data: /tmp/moved/old.yaml: path: /datasets/made-elsewhere does not exist; the yaml's "
        "own folder holds the dataset, so path: is /tmp/moved"
    ], logs[-4000:]
    assert not [line for line in val if not line.startswith("INFO ")], logs[-4000:]
    assert "WRONG-RC 1" in logs, logs[-4000:]
    wrong = [line.removeprefix("WRONG-LOG ") for line in logs.splitlines() if line.startswith("WRONG-LOG ")]
    assert wrong == [  # the whole output of the failed `rig train`
        "ERROR rig: /tmp/empty/data.yaml: its path: /datasets/made-elsewhere does not exist, and its own "
        "folder /tmp/empty holds no images/train either: set path: to the dataset's folder, or remove "
        "path: and keep data.yaml in the dataset's folder",
    ], logs[-4000:]
