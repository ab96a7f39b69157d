"""Ultralytics' settings read as baked, fonts local and the DDP dir writable, for any uid."""

from ultralytics.utils import SETTINGS, USER_CONFIG_DIR
from ultralytics.utils.checks import check_font

assert SETTINGS["datasets_dir"] == "/datasets" and SETTINGS["weights_dir"] == "/weights", dict(SETTINGS)
assert SETTINGS["runs_dir"] == "/workspace/runs" and SETTINGS["sync"] is False, dict(SETTINGS)
for f in ("Arial.ttf", "Arial.Unicode.ttf"):
    p = check_font(f)
    assert p is not None and p.resolve().is_file(), f
(USER_CONFIG_DIR / "DDP").mkdir(exist_ok=True)
print("SETTINGS-OK")
