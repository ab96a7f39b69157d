"""The image's well-known places: the volumes, rig's own state, and what the image ships."""

from pathlib import Path

WORKSPACE = Path("/workspace")  # the `workspace` volume: notebooks, runs; yolo's
RUNS = WORKSPACE / "runs"
DATASETS = Path("/datasets")  # the `datasets` volume; yolo's
WEIGHTS = Path("/weights")  # the `weights` volume; yolo's
CACHE = Path("/cache")  # the `cache` volume: compile caches; yolo's
HOME = Path("/home/yolo")  # the `home` volume: dotfiles, history, ~/.local (its pip installs); yolo's
# Volumes whose contents user yolo controls: root never follows a link in them (rig.safefs).
USER_VOLUMES = (WORKSPACE, DATASETS, WEIGHTS, CACHE, HOME)
STATE = Path("/var/lib/rig")  # the `state` volume: host keys, the generated token; root's only
RUN = Path("/run/rig")  # this start's state: the services' status, Jupyter's token config
SERVICES_STATE = RUN / "services.json"  # what `rig serve` reports and `rig health` reads
OPT = Path("/opt/rig")  # what the image ships: configs, notebooks, Ultralytics settings
DEMO_DATASET = DATASETS / "demo"  # `make demo-data`'s dataset, `rig train`'s default
