"""What a hostile `yolo` (or a second container on the same volumes) can hand the image as input:
FIFOs, links, huge or empty files where data, images or the node image cache's files belong, a held
lock, and /metrics from another container. Each ends in one clear line and a non-zero exit within
seconds, or is skipped (rebuilt) with one WARNING while the run goes on; nothing hangs.

Cases share a container where they do not interfere: every command inside runs under `timeout -k`
(a process that ignores TERM is killed), and reports its exit code, its seconds and its output.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.helpers import SCRIPTS
from tests.helpers.containers import Containers, free_port
from tests.helpers.names import unique
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.image

# CASE NAME LIMIT CMD...: CMD under `timeout -k 5 LIMIT`; one `CASE {json}` line (name, rc, seconds,
# output). $AS_YOLO: the entrypoint's own way from root to yolo (the script itself runs as root).
PRELUDE = r"""
set -u
CASE() {
  local name=$1 limit=$2; shift 2
  local t0; t0=$(date +%s%N)
  timeout -k 5 "$limit" "$@" > "/tmp/case.$name" 2>&1; local rc=$?
  python -c 'import json, sys, time
name, rc, t0, path = sys.argv[1:]
case = {"name": name, "rc": int(rc), "s": round(time.time() - int(t0) / 1e9, 1)}
print("CASE " + json.dumps({**case, "out": open(path, errors="replace").read()}))' \
    "$name" "$rc" "$t0" "/tmp/case.$name"
}
AS_YOLO="env -u RIG_USER rig exec --"
"""
TRAIN = (
    "rig train device=cpu model=yolo11n.yaml imgsz=64 batch=4 epochs=1 workers=0 plots=False "
    "project=/tmp/runs exist_ok=True"
)
# Root trains in a project of its own: rig never writes into yolo's (/tmp/runs is yolo's by then).
TRAIN_AS_ROOT = TRAIN.replace("project=/tmp/runs", "project=/tmp/root-runs")
DEMO = "rig demo-data {dir} --train 8 --val 2 --imgsz 64 >/dev/null"


@pytest.fixture(scope="module")
def found(docker_client: Any, image: str) -> Iterator[dict[str, dict[str, Any]]]:
    """SCRIPT's cases, run once as root in one container (RIG_USER=root; yolo's steps through the
    entrypoint's own drop), by name."""
    containers = Containers(docker_client, image)
    try:
        rc, logs = containers.oneshot(
            ["bash", "-c", PRELUDE + SCRIPT],
            timeout=2400,
            network_mode="none",
            shm_size="1g",
            environment={"RIG_USER": "root"},
            volumes={str(SCRIPTS): {"bind": "/probe", "mode": "ro"}},
        )
    finally:
        containers.cleanup()
    cases = {}
    for line in logs.splitlines():
        if line.startswith("CASE "):
            case = json.loads(line[5:])
            cases[case["name"]] = case
            print(f"{case['name']}: exit {case['rc']} after {case['s']} s")  # shown with -s, or on failure
    assert rc == 0 and cases, logs[-6000:]
    yield cases


def errors(case: dict[str, Any]) -> list[str]:
    return [line for line in case["out"].splitlines() if line.startswith("ERROR")]


def one_error_line(case: dict[str, Any], *fragments: str, within: float = 60) -> None:
    """Exit 1, one ERROR line naming each fragment, nothing else alarming, within seconds."""
    assert case["rc"] == 1, case
    assert case["s"] < within, case
    lines = errors(case)
    assert len(lines) == 1 and all(f in lines[0] for f in fragments), case["out"][-3000:]
    assert "Traceback" not in case["out"], case["out"][-3000:]


def warnings(case: dict[str, Any], component: str) -> list[str]:
    return [line for line in case["out"].splitlines() if line.startswith(f"WARNING {component}")]


SCRIPT = f"""
{DEMO.format(dir="/tmp/d")}
chown -R yolo:yolo /tmp/d
# ---- data.yaml and its splits: one line, exit 1, within seconds
$AS_YOLO mkfifo /tmp/fifo.yaml
$AS_YOLO python -c "open('/tmp/big.yaml', 'w').write('train: [' + '0,' * 50_000_000 + '0]\\n')"
$AS_YOLO mkdir -p /tmp/e/images/train
$AS_YOLO cp -r /tmp/d/images/val /tmp/e/images/
$AS_YOLO mkfifo /tmp/e/train.txt /tmp/e/val.txt
$AS_YOLO bash -c "cd /tmp/e && cp -r /tmp/d/images/train images/full
  printf 'path: /tmp/e\\ntrain: images/train\\nval: images/val\\nnames: {{0: a}}\\n' > empty.yaml
  printf 'path: /tmp/e\\ntrain: train.txt\\nval: images/val\\nnames: {{0: a}}\\n' > train-fifo.yaml
  printf 'path: /tmp/e\\ntrain: images/full\\nval: val.txt\\nnames: {{0: a}}\\n' > val-fifo.yaml"
CASE fifo-yaml 120 $AS_YOLO {TRAIN} data=/tmp/fifo.yaml
CASE big-yaml 120 $AS_YOLO {TRAIN} data=/tmp/big.yaml
CASE empty-split 120 $AS_YOLO {TRAIN} data=/tmp/e/empty.yaml
CASE train-fifo 120 $AS_YOLO {TRAIN} data=/tmp/e/train-fifo.yaml
CASE val-fifo 120 $AS_YOLO {TRAIN} data=/tmp/e/val-fifo.yaml
CASE doctor-fifo-yolo 120 $AS_YOLO rig doctor --data /tmp/fifo.yaml
CASE doctor-fifo-root 120 rig doctor --data /tmp/fifo.yaml
# ---- a FIFO among the images, and one where an image's label file should be
$AS_YOLO bash -c 'mkfifo /tmp/d/images/train/zz_fifo.jpg
  label=$(ls /tmp/d/labels/train | head -1); rm /tmp/d/labels/train/$label; mkfifo /tmp/d/labels/train/$label'
CASE doctor-fifo-image-yolo 120 $AS_YOLO rig doctor --data /tmp/d/data.yaml
CASE doctor-fifo-image-root 120 rig doctor --data /tmp/d/data.yaml
# ---- the node image cache. What a user may leave at the cache file's path, each planted in turn
# after a first build and the dataset built again as the trainer builds it (the probe's first
# build names the train set's file).
CASE kinds 300 $AS_YOLO python /probe/hostile_cache_probe.py /tmp/d/data.yaml
key=$(grep -o '/cache/images/[0-9a-f]*.img' /tmp/case.kinds | head -1 | xargs basename | cut -d. -f1)
# A FIFO at the cache file's path (it hung rig train, silently and past `timeout`), trained on with
# the FIFO image and label: skipped, rebuilt, the run goes on.
$AS_YOLO bash -c "rm /cache/images/$key.img && mkfifo /cache/images/$key.img"
CASE fifo-run 600 $AS_YOLO {TRAIN} data=/tmp/d/data.yaml cache=ram name=fifo
# Root (RIG_USER=root) trains on the same images, where yolo's valid file of them lies (the run
# above rebuilt it) and yolo has linked KEY.lock to root's state folder. Root keeps its own cache:
# it neither maps yolo's pixels nor creates the link's target.
$AS_YOLO bash -c "rm -f /cache/images/$key.lock; ln -s /var/lib/rig/created-by-root /cache/images/$key.lock"
mkdir -p /var/lib/rig
CASE root 600 {TRAIN_AS_ROOT} data=/tmp/d/data.yaml cache=ram name=root
CASE state-after-root 10 ls -A /var/lib/rig
CASE lock-after-root 10 readlink /cache/images/$key.lock
# The build lock held by a process that builds nothing: it hung rig train, silently.
$AS_YOLO bash -c "rm /cache/images/$key.img /cache/images/$key.lock
  flock /cache/images/$key.lock sleep 900 >/dev/null 2>&1 &"
sleep 1
CASE held-lock 400 env RIG_CACHE_LOCK_STALL_S=3 $AS_YOLO {TRAIN} data=/tmp/d/data.yaml cache=ram name=held
pkill -x sleep || true
"""


def test_bad_data_is_one_error_line_within_seconds(found: dict[str, dict[str, Any]]) -> None:
    one_error_line(found["fifo-yaml"], "/tmp/fifo.yaml: it is a FIFO, not a regular file")
    # 100 MB of one list: refused before it is parsed (parsing took 150 s and 4.7 GB).
    one_error_line(found["big-yaml"], "/tmp/big.yaml: it is larger than 1 MiB (100000011 bytes)", within=30)
    one_error_line(found["empty-split"], "/tmp/e/empty.yaml: train: no images in /tmp/e/images/train")
    one_error_line(found["train-fifo"], "train: /tmp/e/train.txt is a FIFO")
    one_error_line(found["val-fifo"], "val: /tmp/e/val.txt is a FIFO")
    # rig doctor, as yolo and as root: the dataset check fails with the reason (no GPU here: exit 1).
    for who in ("yolo", "root"):
        doctor = found[f"doctor-fifo-{who}"]
        assert doctor["rc"] == 1 and doctor["s"] < 60, doctor
        fifo = r"fail +dataset +/tmp/fifo.yaml: .*it is a FIFO, not a regular file"
        assert re.search(fifo, doctor["out"]), doctor
        sample = found[f"doctor-fifo-image-{who}"]
        assert sample["rc"] in (0, 1) and sample["s"] < 60 and "Traceback" not in sample["out"], sample
        assert re.search(r"\S+ +dataset +/tmp/d/data.yaml: 8 train images", sample["out"]), sample["out"]


def test_fifo_images_labels_and_cache_file_are_skipped_and_the_run_goes_on(
    found: dict[str, dict[str, Any]],
) -> None:
    run = found["fifo-run"]
    assert run["rc"] == 0, run["out"][-4000:]
    assert "zz_fifo.jpg: ignoring corrupt image/label: it is a FIFO, not a regular file" in run["out"]
    label = r"ignoring corrupt image/label: its label file \S+ is a FIFO, not a regular file"
    assert re.search(label, run["out"]), run["out"][-4000:]
    rebuilt = warnings(run, "imagecache")
    assert len(rebuilt) == 1, run["out"][-4000:]
    assert "is a FIFO, not a regular file: not used; the images are cached again" in rebuilt[0], rebuilt
    assert "INFO imagecache: 7 images" in run["out"] and "decoded into /cache/images/" in run["out"]
    assert not errors(run), run["out"][-4000:]


def test_a_held_cache_lock_is_waited_for_then_given_up_naming_its_holder(
    found: dict[str, dict[str, Any]],
) -> None:
    held = found["held-lock"]
    assert held["rc"] == 0, held["out"][-4000:]
    waiting = [line for line in held["out"].splitlines() if "waiting for /cache/images/" in line]
    holder = r"by pid \d+ \(flock /cache/images/\w+\.lock sleep 900\)"
    assert len(waiting) == 1 and re.search(holder, waiting[0]), held["out"][-4000:]
    given_up = warnings(held, "imagecache")
    assert len(given_up) == 1 and "with no progress for 3 s" in given_up[0], held["out"][-4000:]
    assert "RIG_CACHE_LOCK_STALL_S" in given_up[0] and "flock /cache/images/" in given_up[0]


def test_what_else_is_planted_at_the_cache_path_is_rebuilt(found: dict[str, dict[str, Any]]) -> None:
    kinds = found["kinds"]
    assert kinds["rc"] == 0, kinds["out"][-4000:]
    probes = [json.loads(line[6:]) for line in kinds["out"].splitlines() if line.startswith("PROBE ")]
    assert [p["kind"] for p in probes] == [
        "symlink", "other-dataset", "wrong-shape", "wrong-dtype", "folder", "world-writable",
    ]  # fmt: skip
    assert all(p["mapped"] and p["same"] for p in probes), probes
    rebuilt = warnings(kinds, "imagecache")
    assert len(rebuilt) == len(probes) and all("the images are cached again" in w for w in rebuilt), rebuilt
    assert "Traceback" not in kinds["out"]


def test_root_keeps_its_own_cache(found: dict[str, dict[str, Any]]) -> None:
    root = found["root"]
    assert root["rc"] == 0, root["out"][-4000:]
    assert "decoded into /root/.cache/rig/images/" in root["out"], root["out"][-4000:]
    assert "/cache/images/" not in root["out"].replace("/root/.cache/rig/images/", "")  # yolo's: not mapped
    assert "created-by-root" not in found["state-after-root"]["out"], found["state-after-root"]
    assert found["lock-after-root"]["out"].strip() == "/var/lib/rig/created-by-root"  # left as it was


# ---- /metrics -----------------------------------------------------------------------------------------
@pytest.fixture
def network(docker_client: Any) -> Iterator[Any]:
    net = docker_client.networks.create(unique("metrics"))
    try:
        yield net
    finally:
        net.remove()


def pids(container: Any) -> int:
    return int(container.stats(stream=False)["pids_stats"]["current"])


def test_metrics_answer_this_host_only_and_idle_clients_hold_no_threads(
    network: Any, containers: Containers
) -> None:
    port = free_port()
    demo = DEMO.format(dir="/tmp/d")
    run = containers.run(
        ["bash", "-c", f"{demo} && {TRAIN.replace('epochs=1', 'epochs=500')} data=/tmp/d/data.yaml"],
        ports={"9464/tcp": ("127.0.0.1", port)},
        network=network.name,
        shm_size="1g",
    )
    url = f"http://127.0.0.1:{port}/metrics"

    def serving() -> bool:
        run.reload()
        if run.status != "running":  # pytest.fail: not an Exception, so wait_until stops here
            pytest.fail("the run ended: " + run.logs().decode(errors="replace")[-3000:])
        try:
            r = requests.get(url, timeout=10)
        except requests.RequestException:
            return False
        # From the second epoch on, the run's own threads are all there: the pids count is steady.
        epoch = re.search(r"^yolo_train_epoch (\S+)$", r.text, re.M)
        return r.status_code == 200 and epoch is not None and float(epoch[1]) >= 2

    wait_until(serving, timeout=600, interval=1)  # the host, through the published port
    # Another container on the same network: its connection is closed before anything is read.
    ip = run.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"]
    probe = (
        "import urllib.request\n"
        f"try:\n    print('HTTP', urllib.request.urlopen('http://{ip}:9464/metrics', timeout=20).status)\n"
        "except Exception as e:\n    print('REFUSED', type(e).__name__)\n"
    )
    rc, out = containers.oneshot(["python", "-c", probe], network=network.name, timeout=120)
    assert rc == 0 and "REFUSED" in out and "HTTP" not in out, out
    # 300 idle connections that never finish their request, from the host.
    before = pids(run)
    idle = []
    try:
        for _ in range(300):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            idle.append(s)
        time.sleep(2)
        during = pids(run)
        assert during <= before + 16, (before, during)
        # Back where it was within 30 s, the connections still open.
        wait_until(lambda: pids(run) <= before + 2, timeout=30, interval=1)
        assert serving()
    finally:
        for s in idle:
            s.close()
