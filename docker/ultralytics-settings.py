#!/usr/bin/env python3
"""Bake Ultralytics' settings.json and fonts into YOLO_CONFIG_DIR, at build time.

Settings are written by the pinned Ultralytics itself, so their schema matches and it never
rewrites them at run time: absolute directories in the volumes, sync and third-party
integrations off, TensorBoard on. They are the defaults: `rig exec` copies them into each user's
settings folder (YOLO_CONFIG_DIR, in the `workspace` volume) once, where `yolo settings` changes them. The fonts Ultralytics would download on first plot (Arial.ttf,
Arial.Unicode.ttf) are links to Debian's DejaVu Sans, installed in the runtime stage.

usage: YOLO_CONFIG_DIR=DIR ultralytics-settings.py FONT_FILE
"""

import json
import os
import sys
from pathlib import Path

SETTINGS = {
    "datasets_dir": "/datasets",
    "weights_dir": "/weights",
    "runs_dir": "/workspace/runs",
    "sync": False,  # no anonymous usage events
    "uuid": "",  # no machine-derived id baked into a shared image
    "clearml": False,  # integrations are off unless asked for: none is installed
    "comet": False,
    "dvc": False,
    "mlflow": False,
    "raytune": False,
    "tensorboard": True,  # training curves beside rig's telemetry in the workstation's TensorBoard
    "vscode_msg": False,
    "openvino_msg": False,
}
FONTS = ("Arial.ttf", "Arial.Unicode.ttf")


def main(font: str) -> None:
    config_dir = Path(os.environ["YOLO_CONFIG_DIR"])
    from ultralytics.utils import SETTINGS as live  # reads YOLO_CONFIG_DIR at import

    live.update(SETTINGS)
    target = config_dir / "Ultralytics"
    if Path(live.file).parent != target:
        raise SystemExit(f"ERROR ultralytics-settings: settings went to {live.file}, not {target}")
    written = json.loads(Path(live.file).read_text())
    wrong = {k: written.get(k) for k, v in SETTINGS.items() if written.get(k) != v}
    if wrong:
        raise SystemExit(f"ERROR ultralytics-settings: not applied: {wrong}")
    for name in FONTS:
        link = target / name
        link.unlink(missing_ok=True)
        link.symlink_to(font)
    print(f"INFO ultralytics-settings: wrote {live.file} and font links to {font}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
