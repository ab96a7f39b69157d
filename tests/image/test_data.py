"""Your data and weights in, through `make` as a user runs it: host folders as the volumes, a host
data.yaml for `make train`, `make weights`/`make datasets` from a mirror, and the image built when
missing. Each test is its own compose project, removed with its volumes at the end."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import os
import re
import subprocess
import threading
import urllib.request
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO
from tests.helpers.compose import take_down
from tests.helpers.containers import Containers, free_port
from tests.helpers.names import unique

pytestmark = pytest.mark.image

UID, GID = 4321, 4322  # not the image's 1000, not root
CPU_TRAIN = "device=cpu epochs=1 imgsz=64 batch=4 workers=0 plots=False"


class Make:
    """`make TARGET VAR=...` in the repository, in a compose project of its own, torn down after."""

    def __init__(self, image: str) -> None:
        self.name, self.tag = image.rsplit(":", 1)
        self.project = unique("data")
        self.metrics_port = free_port()  # make train's /metrics, never another run's

    def __call__(self, *args: str, timeout: int = 300) -> tuple[int, str]:
        proc = subprocess.run(
            # ENV_FILE: neither read nor write the checkout's .env (the settings `make up` keeps).
            [
                "make",
                "-s",
                *args,
                f"IMAGE={self.name}",
                f"TAG={self.tag}",
                "CPU_ONLY=yes",
                "ENV_FILE=/dev/null",
                f"TRAIN_METRICS_PORT={self.metrics_port}",
            ],
            cwd=REPO,
            env={**os.environ, "COMPOSE_PROJECT_NAME": self.project},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return proc.returncode, proc.stdout + proc.stderr

    def containers(self) -> str:
        out = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={self.project}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return out.stdout.strip()

    def down(self) -> None:
        for overlay in ([], ["-f", "compose.runs.yaml"]):
            take_down(self.project, "-f", "compose.yaml", *overlay, env={"RUNS_DIR": "/tmp"})


@pytest.fixture
def make(image: str) -> Iterator[Make]:
    m = Make(image)
    try:
        yield m
    finally:
        m.down()


def owned_folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, UID, GID)
    return path


def errors(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("ERROR ")]


def test_make_train_on_a_host_folder(make: Make, containers: Containers, tmp_path: Path) -> None:
    home = owned_folder(tmp_path / "home")
    data = home / "helmets"
    # The dataset made in another container, where it sat at /datasets/helmets: `make train DATA=`
    # then reads it from the host path it has here (its data.yaml names no folder, so it moves).
    rc, logs = containers.oneshot(
        ["rig", "demo-data", "/datasets/helmets", "--train", "8", "--val", "4", "--imgsz", "64"],
        environment={"RIG_UID": str(UID), "RIG_GID": str(GID)},
        volumes={str(home): {"bind": "/datasets", "mode": "rw"}},
        network_mode="none",
        timeout=120,
    )
    assert rc == 0, logs
    assert "path:" not in (data / "data.yaml").read_text()
    before = sorted(str(p.relative_to(data)) for p in data.rglob("*"))
    runs = owned_folder(tmp_path / "runs")

    # The /metrics URL make prints is where the run serves them, while it trains.
    url = f"http://127.0.0.1:{make.metrics_port}/metrics"
    scrapes: list[str] = []
    done = threading.Event()

    def scrape() -> None:
        while not done.wait(0.3):
            with contextlib.suppress(OSError):
                scrapes.append(urllib.request.urlopen(url, timeout=2).read().decode())

    scraper = threading.Thread(target=scrape, daemon=True)
    scraper.start()
    try:
        rc, out = make(
            "train",
            f"DATA={data}/data.yaml",
            f"RUNS_DIR={runs}",
            f"RIG_UID={UID}",
            f"RIG_GID={GID}",
            f"TRAIN_ARGS={CPU_TRAIN}",
            timeout=600,
        )
    finally:
        done.set()
        scraper.join(timeout=10)
    assert rc == 0, out[-4000:]
    assert f"INFO metrics: {url} while this run trains" in out, out
    assert any("\nyolo_" in s or "\nrig_" in s for s in scrapes), scrapes[-1:]
    assert f"INFO data: /mnt/data/data.yaml is host folder {data}'s data.yaml: path: /mnt/data" in out, out
    assert "does not exist" not in out, out  # nothing to move: the yaml names no folder
    best = runs / "detect/train/weights/best.pt"
    assert best.is_file(), out[-3000:]
    owners = {(p.stat().st_uid, p.stat().st_gid) for p in [runs, *runs.rglob("*")]}
    assert owners == {(UID, GID)}, owners
    assert sorted(str(p.relative_to(data)) for p in data.rglob("*")) == before  # mounted read-only


def test_a_project_cut_short_goes_with_its_volumes_and_network(make: Make) -> None:
    """What a test that times out leaves running (`make train`'s one-off container, the volumes it
    mounts, the network), which compose's `down` alone leaves behind, goes with the project."""
    started = subprocess.run(
        ["docker", "compose", "-p", make.project, "-f", "compose.yaml", "-f", "compose.cpu.yaml",
         "run", "-d", "--no-deps", "workstation", "sleep", "300"],
        cwd=REPO, env={**os.environ, "IMAGE": f"{make.name}:{make.tag}"}, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert started.returncode == 0, started.stdout + started.stderr
    assert make.containers()
    make.down()
    label = f"label=com.docker.compose.project={make.project}"
    for kind in (["ps", "--all"], ["volume", "ls"], ["network", "ls"]):
        argv = ["docker", *kind, "--quiet", "--filter", label]
        left = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout.split()
        assert left == [], (kind, left)


def test_a_missing_host_folder_is_one_line_and_starts_nothing(make: Make, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-folder"
    for target in ("up", "train"):
        rc, out = make(target, f"DATASETS_DIR={missing}")
        assert rc == 2, out
        assert errors(out) == [
            f"ERROR make: DATASETS_DIR={missing} is not a readable folder on this host; "
            "create it or fix the path"
        ], out
        # make's own "make: *** ..." line follows (make[1] when this suite itself runs under make).
        assert all(
            line.startswith("ERROR make:") or re.match(r"make(\[\d+\])?: \*\*\*", line)
            for line in out.strip().splitlines()
        ), out
    assert make.containers() == ""
    assert not missing.exists()


class _Mirror(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A folder of files over HTTP on the host's loopback, like a company mirror."""
    root = tmp_path / "mirror"
    root.mkdir()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: _Mirror(*a, directory=str(root)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/", root
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_make_weights_and_datasets_from_a_mirror(
    make: Make, mirror: tuple[str, Path], tmp_path: Path
) -> None:
    url, served = mirror
    with zipfile.ZipFile(served / "yolo11n.pt", "w") as z:  # laid out like torch.save's archive
        z.writestr("yolo11n/data.pkl", b"\x80\x02}q\x00.")
        z.writestr("yolo11n/version", "3\n")
    body = (served / "yolo11n.pt").read_bytes()
    sha = hashlib.sha256(body).hexdigest()
    (served / "yolo11s.pt").write_bytes(body)
    (served / "junk.pt").write_bytes(b"<html>a login page</html>")
    with zipfile.ZipFile(served / "coco8.zip", "w") as z:
        z.writestr("coco8/images/train/1.jpg", b"jpeg")
        z.writestr("coco8/labels/train/1.txt", "0 0.5 0.5 0.1 0.1\n")
    weights, datasets = owned_folder(tmp_path / "weights"), owned_folder(tmp_path / "datasets")
    common = [f"WEIGHTS_DIR={weights}", f"DATASETS_DIR={datasets}", f"RIG_UID={UID}", f"RIG_GID={GID}"]
    host = ["NETWORK=host", f"RIG_ASSETS_URL={url}"]

    rc, out = make("weights", f"W=yolo11n.pt@sha256:{sha}", *common, *host)
    assert rc == 0, out
    got = weights / "yolo11n.pt"
    assert got.read_bytes() == body and (got.stat().st_uid, got.stat().st_gid) == (UID, GID)
    assert "SHA-256 matches" in out, out

    for w, why in [(f"yolo11s.pt@sha256:{'0' * 64}", "does not match"), ("junk.pt", "not a PyTorch archive")]:
        rc, out = make("weights", f"W={w}", *common, *host)
        assert rc != 0, out
        assert len(errors(out)) == 1 and why in errors(out)[0] and "nothing was kept" in errors(out)[0], out
    assert sorted(p.name for p in weights.iterdir()) == ["yolo11n.pt"]  # no partial or refused file

    closed = f"RIG_ASSETS_URL=http://127.0.0.1:{free_port()}/"
    rc, out = make("weights", "W=yolo11m.pt", *common, "NETWORK=host", closed)
    assert rc != 0, out
    assert len(errors(out)) == 1 and "offline, copy yolo11m.pt (from http://127.0.0.1:" in errors(out)[0], out
    assert "into /weights" in errors(out)[0], out

    rc, out = make("datasets", "D=coco8.yaml", *common, *host)
    assert rc == 0, out
    assert (datasets / "coco8/labels/train/1.txt").is_file(), out
    assert sorted(p.name for p in datasets.iterdir()) == ["coco8"], out  # no zip, no staging left
    assert (datasets / "coco8").stat().st_uid == UID


def test_make_train_builds_a_missing_image(image: str, docker_client: Any) -> None:
    # A tag of this test's own: the build reuses the cache, and only this tag is removed.
    fresh = Make(f"{image.rsplit(':', 1)[0]}-fresh-{uuid.uuid4().hex[:6]}:test")
    tag = f"{fresh.name}:{fresh.tag}"
    try:
        rc, out = fresh("train", "TRAIN_ARGS=device=cpu", timeout=900)
        built = docker_client.images.list(name=tag)
    finally:
        fresh.down()
        version = subprocess.run(["make", "-s", "version"], cwd=REPO, capture_output=True, text=True).stdout
        stack = docker_client.images.get(image).labels["io.yolo-rig.stack"]
        for t in (tag, f"{fresh.name}:{version.strip()}-{stack}"):  # `make build` tags VERSION-STACK too
            subprocess.run(["docker", "rmi", t], capture_output=True, timeout=120, check=False)
    assert built, out[-3000:]
    # Then the training command ran in it: a fresh datasets volume has no demo data, which it says.
    assert rc != 0
    assert errors(out) == [
        "ERROR rig: no data= given and no demo dataset at /datasets/demo/data.yaml; "
        "run `make demo-data` or pass data="
    ], out[-3000:]
