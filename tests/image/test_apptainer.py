"""The image as Apptainer runs it (tests/helpers/apptainer.py, the stand-in written from Apptainer 1.5's
sources): any uid, a read-only root, the host's home and /tmp bound, the host's environment passed in,
no PID namespace. `rig train` on CPU ranks, `rig bench` and `yolo` as a cluster user would start them,
with a login shell's PYTHONPATH holding a planted `ultralytics`, a PYTHONHOME and a CUDA_HOME; the
workstation's one line; a Jupyter server of the user's own on their port; the stand-in's own rules."""

from __future__ import annotations

import json
import re
import secrets
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.apptainer import Apptainer, Host
from tests.helpers.containers import free_port
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.image

UID = 4321
# The host's Python path as a site's modules set it, with a module named like the image's own.
PLANTED = (
    "import pathlib\npathlib.Path(__file__).with_name('IMPORTED').touch()\nraise SystemExit('planted')\n"
)
HOST_ENV = {
    "PYTHONPATH": "/home/hpcuser/site-python",
    "PYTHONHOME": "/opt/site/python3.11",  # the image's Python would not start
    "CUDA_HOME": "/opt/site/cuda-12.4",
    "VIRTUAL_ENV": "/home/hpcuser/venv",  # the image's ENV wins: never reaches the container
}
TRAIN = ["device=cpu", "data=demo/data.yaml", "model=yolo11n.yaml", "epochs=1", "imgsz=64", "batch=4"]


@pytest.fixture
def host(tmp_path: Path) -> Host:
    h = Host.make(tmp_path, UID, UID, **HOST_ENV)
    site = h.home / "site-python"
    site.mkdir()
    (site / "ultralytics.py").write_text(PLANTED)
    return h


@pytest.fixture
def apptainer(docker_client: Any, image: str, host: Host) -> Iterator[Apptainer]:
    a = Apptainer(docker_client, image, host)
    try:
        yield a
    finally:
        a.cleanup()


def files(folder: Path) -> dict[str, tuple[int, float]]:
    return {str(p.relative_to(folder)): (p.lstat().st_size, p.lstat().st_mtime) for p in folder.rglob("*")}


def lines(out: str, level: str) -> list[str]:
    """rig's lines of a level (the log contract's `LEVEL component: `), not Ultralytics' own."""
    return [line for line in out.splitlines() if re.match(rf"{level} [a-z_]+: ", line)]


@pytest.mark.slow
def test_rig_train_bench_and_yolo_as_a_cluster_user_runs_them(apptainer: Apptainer, host: Host) -> None:
    """`apptainer exec IMAGE rig ...` (rig prepares itself) and `apptainer run IMAGE yolo ...` (the
    entrypoint prepares yolo): the planted module is never imported, the runs land in ./runs, the
    settings and caches in the user's private folder, nothing in the home."""
    home_before = {k: v for k, v in files(host.home).items() if not k.startswith("project")}
    rc, out = apptainer.exec(["rig", "demo-data", "demo", "--train", "8", "--val", "4", "--imgsz", "64"], 120)
    assert rc == 0, out
    rc, out = apptainer.exec(["rig", "train", "--cpu-ranks", "2", *TRAIN, "plots=False"], 600)
    assert rc == 0, out[-4000:]
    private = f"/tmp/yolo-rig-{UID}"
    # One WARNING for the host's variables (VIRTUAL_ENV is the image's already), one INFO for the places.
    dropped = [line for line in lines(out, "WARNING") if "dropped the host's" in line]
    assert len(dropped) == 1 and all(f"{n}=" in dropped[0] for n in ("PYTHONPATH", "PYTHONHOME", "CUDA_HOME"))
    assert "VIRTUAL_ENV" not in dropped[0]
    assert lines(out, "WARNING") == dropped, out[-4000:]  # nothing else: no memory binding refused either
    moved = [line for line in lines(out, "INFO") if "read-only here" in line]
    assert len(moved) == 1, out[-4000:]
    assert f"runs in ./runs of the folder you start in ({host.cwd_path}/runs now)" in moved[0]
    assert f"Ultralytics' settings in {private}/config" in moved[0]
    assert f"caches in {private}/cache" in moved[0]
    # The node image cache works there: one copy for both ranks.
    assert re.search(rf"INFO imagecache: 8 images .* decoded into {private}/cache/images/", out), out[-4000:]
    run = host.cwd / "runs/detect/train"
    assert (run / "weights/last.pt").is_file() and (run / "results.csv").is_file()
    assert (run / "weights/last.pt").stat().st_uid == UID

    predict = ["yolo", "predict", "model=runs/detect/train/weights/last.pt", "source=demo/images/val"]
    rc, out = apptainer.run([*predict, "imgsz=64"], 300)
    assert rc == 0, out[-4000:]
    assert (host.cwd / "runs/detect/predict").is_dir(), out[-4000:]
    assert len([line for line in lines(out, "WARNING") if "dropped the host's" in line]) == 1  # rig exec's

    rc, out = apptainer.exec(
        ["rig", "bench", "--quick", "--model", "yolo11n.yaml", "--imgsz", "64", "--batch", "4",
         "--train-images", "16", "--source-size", "64x64", "--json", "bench.json"], 600,
    )  # fmt: skip
    assert rc == 0, out[-4000:]
    res = json.loads((host.cwd / "bench.json").read_text())
    assert res["levers_record"].startswith(f"{private}/cache/levers/"), res["levers_record"]

    assert not (host.home / "site-python/IMPORTED").exists()  # the planted module never ran
    home_after = {k: v for k, v in files(host.home).items() if not k.startswith("project")}
    assert home_after == home_before  # nothing of the image in the host's home
    mode = (host.tmp / f"yolo-rig-{UID}").stat()
    assert (mode.st_uid, mode.st_mode & 0o777) == (UID, 0o700)


def test_rig_serve_is_one_line_and_tini_says_nothing(apptainer: Apptainer, host: Host) -> None:
    """`apptainer run IMAGE` runs the CMD, `rig serve`, through the ENTRYPOINT: one line, no
    traceback, and tini (not PID 1 here) prints no warning of its own."""
    host.environ = {k: v for k, v in host.environ.items() if k not in HOST_ENV}
    rc, out = apptainer.run([], 120)
    assert rc == 1, out
    assert out.strip().splitlines() == [out.strip()], out
    assert out.startswith("ERROR rig: rig serve (sshd, JupyterLab, TensorBoard) cannot run under Apptainer")
    assert f"uid {UID}" in out and "apptainer run --nv IMAGE rig train" in out


def test_a_jupyter_server_of_the_users_own_on_their_port(apptainer: Apptainer) -> None:
    port, token = free_port(), secrets.token_hex(16)
    argv = ["jupyter", "lab", "--no-browser", f"--port={port}", f"--IdentityProvider.token={token}"]
    url = f"http://127.0.0.1:{port}/api/status"

    def status(query: str = "") -> int:
        try:
            with urllib.request.urlopen(url + query, timeout=5) as response:
                return int(response.status)
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return 0

    with apptainer.started("run", argv):
        wait_until(lambda: status(f"?token={token}") == 200, timeout=120)
        assert status() == 403  # behind its token


def test_the_stand_in_runs_as_apptainer_does(apptainer: Apptainer, host: Host) -> None:
    """Any uid, a read-only root, no PID namespace, the host's environment under the image's, the
    caller's folder; `run` hands its arguments to the ENTRYPOINT (rig exec)."""
    host.environ |= {"YOLO_OFFLINE": "false", "SITE_VAR": "from-the-host", "LD_LIBRARY_PATH": "/opt/site/lib"}
    probe = (
        "id -u; echo $$; touch /opt/x 2>&1 | sed 's/.*: //'; pwd; "
        "echo $HOME $YOLO_OFFLINE $SITE_VAR $LD_LIBRARY_PATH $APPTAINER_CONTAINER"
    )
    rc, out = apptainer.exec(["sh", "-c", probe], 60)
    assert rc == 0, out
    uid, pid, touch, cwd, env = out.strip().splitlines()
    assert uid == str(UID) and pid != "1" and touch == "Read-only file system" and cwd == host.cwd_path
    assert env == f"{host.home_path} true from-the-host /.singularity.d/libs /images/yolo-rig.sif"
    rc, out = apptainer.run(["printf", "%s|", "a b", "c"], 60)  # through the ENTRYPOINT: rig exec's lines
    assert rc == 0 and out.startswith("a b|c|") and "INFO exec: the image's folders are read-only" in out, out
