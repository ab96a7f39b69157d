"""An experiment tracker as a user adds one: `pip install mlflow` in a workstation session (through
rig's pip gate, from PyPI over the host's proxy and CA: whatever MLflow is current that day), then
docs/user-environment.md's recipe: a run trained with `mlflow=True` on a container with no network
at all, sharing the workstation's volumes, and its metrics read back from the SQLite store."""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.helpers.workstation import Workstation, running, start

pytestmark = [pytest.mark.image, pytest.mark.slow]

HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")  # a TLS-intercepting proxy's CA, where the host has one
READ_BACK = """
import mlflow
client = mlflow.MlflowClient("{uri}")
(run,) = client.search_runs([client.get_experiment_by_name("/workspace/runs/detect").experiment_id])
print("RUN", run.info.run_name, run.info.status)
for key in ("train/box_loss", "metrics/mAP50B", "lr/pg0"):
    print("METRIC", key, [m.step for m in client.get_metric_history(run.info.run_id, key)])
print("ARTIFACTS", sorted(a.path for a in client.list_artifacts(run.info.run_id)))
"""


def recipe() -> tuple[str, str]:
    """docs/user-environment.md's MLflow recipe: the tracking URI it exports and the folder it starts in."""
    text = (REPO / "docs/user-environment.md").read_text()
    block = text.split("## Experiment trackers: MLflow", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    uri = re.search(r"MLFLOW_TRACKING_URI=(\S+)", block)
    folder = re.search(r"&& cd (\S+)", block)
    assert uri and folder, block
    return uri[1], folder[1]


@pytest.fixture(scope="module")
def ws(image: str) -> Iterator[Workstation]:
    with tempfile.TemporaryDirectory(prefix="trackers-test-") as d:
        ca = {"CA_BUNDLE": str(HOST_CA)} if HOST_CA.exists() else {}
        w = start("trackers-test", Path(d), **ca)
        with running(w, 20):
            yield w


def test_mlflow_installed_as_a_user_does_tracks_a_run_offline(ws: Workstation, image: str) -> None:
    show = "python -c 'import mlflow; print(\"MLFLOW\", mlflow.__version__)'"
    installed = ws.ssh(f"pip install mlflow && {show}", timeout=900)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    version = re.search(r"^MLFLOW (\d+)\.(\d+)", installed.stdout, re.M)
    assert version and (int(version[1]), int(version[2])) >= (3, 13), installed.stdout[
        -500:
    ]  # the SQLite era
    uri, folder = recipe()
    # The run: the same volumes (the user's ~/.local and settings, the runs), no network at all.
    script = (
        "rig demo-data /tmp/demo --train 8 --val 4 --imgsz 64 >/dev/null"
        " && yolo settings mlflow=True >/dev/null"
        f" && export MLFLOW_TRACKING_URI={uri} GIT_PYTHON_REFRESH=quiet && mkdir -p {folder} && cd {folder}"
        " && rig train device=cpu data=/tmp/demo/data.yaml model=yolo11n.yaml epochs=2 imgsz=64 batch=4"
        " plots=False name=tracked && python - <<'PY'\n" + READ_BACK.format(uri=uri) + "PY\n"
    )
    volumes = [f"{ws.project}_{name}" for name in ("workspace", "home")]
    run = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--shm-size", "1g",
         "-v", f"{volumes[0]}:/workspace", "-v", f"{volumes[1]}:/home/yolo", image, "bash", "-lc", script],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    assert "logging run_id(" in out and f"to {uri}" in out, out[-4000:]
    assert "RUN tracked FINISHED" in out, out[-4000:]
    for key in ("train/box_loss", "lr/pg0"):
        assert f"METRIC {key} [0, 1]" in out, out[-3000:]  # one value per epoch
    # Each epoch's validation, then the final one of best.pt, logged at the step after the last.
    assert "METRIC metrics/mAP50B [0, 1, 2]" in out, out[-3000:]
    artifacts = re.search(r"^ARTIFACTS (.*)$", out, re.M)
    assert artifacts and "'weights'" in artifacts[1] and "'results.csv'" in artifacts[1], out[-3000:]
    assert "WARNING mlflow.utils.git_utils" not in out  # GIT_PYTHON_REFRESH=quiet, as the recipe says
