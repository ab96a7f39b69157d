"""The GPU check's rehearsal (`make gpu-rehearsal`, and `make test` runs it): tools/gpu_check.sh, the
very call a lent GPU box gets, on the CPU in a container of the image made the box less its GPU: the
image's venv without every package that is not on the box's list (Ultralytics, hostlist, polars, ...),
no network, what rig needs beyond the box's packages installed with --no-index from the carried wheels
(tools/gpu_wheels.py's set at uv.lock's versions, fetched for the image's Python 3.11), toy sizes.

It fails when a part fails, is cut at its share of the budget or skips, when anything imports what was
not carried, when a part leaves out YOLO26n (its runs with MuSGD beside YOLO11n's, its levers and
amp=bf16's reason, its planner cases, its stop and resume), or when $OUT holds more than the 8 files
(2 folders down) that come back from the box; `--again` reruns only the part the notes say was killed
while it ran. Without the hostlist wheel, the check stops at its import check naming it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.helpers.containers import Containers

pytestmark = [pytest.mark.image]

# The rehearsal's Python is the image's; pip stands in for the box's own (the image's venv has none).
PYTHON_VERSION = "3.11"
PIP_VERSION = "24.2"
CACHE = REPO / "build" / "gpu-rehearsal"
PARTS = ("env", "runs", "tail", "levers", "planner", "resume")
MAX_FILES = 8


@pytest.fixture(scope="module")
def carried() -> tuple[Path, Path]:
    """The carried wheels for Python 3.11 and the box's pip, fetched on the host once (cached in build/)."""
    wheels, pip = CACHE / f"wheels-py{PYTHON_VERSION}", CACHE / "pip"
    r = subprocess.run(
        [sys.executable, "tools/gpu_wheels.py", "--python-version", PYTHON_VERSION, "--dest", str(wheels)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    if not list(pip.glob(f"pip-{PIP_VERSION}-*.whl")):
        pip.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                "python3",
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                f"pip=={PIP_VERSION}",
                "-d",
                str(pip),
            ],
            check=True,
            timeout=300,
        )
    return wheels, pip


def rehearse(containers: Containers, wheels: Path, pip: Path, out: Path, without: Path) -> tuple[int, str]:
    for folder in (out, without):
        folder.mkdir(mode=0o777, exist_ok=True)
    return containers.oneshot(
        ["bash", "/repo/tests/scripts/gpu_rehearsal.sh"],
        entrypoint=[],
        user="root",
        network_mode="none",
        shm_size="1g",
        volumes={
            str(REPO): {"bind": "/repo", "mode": "ro"},
            str(wheels): {"bind": "/wheels", "mode": "ro"},
            str(pip): {"bind": "/pip", "mode": "ro"},
            str(out): {"bind": "/out", "mode": "rw"},
            str(without): {"bind": "/out-without", "mode": "rw"},
        },
        timeout=900,
    )


def notes(out: Path) -> dict[str, list[str]]:
    """Each part's notes in order: started, then ok / failed / cut."""
    found: dict[str, list[str]] = {}
    for line in (out / "notes.txt").read_text().splitlines():
        _, part, state, *_ = line.split()
        found.setdefault(part, []).append(state)
    return found


def test_the_gpu_check_passes_on_the_box_less_its_gpu_stops_without_hostlist_and_reruns_what_a_kill_cut(
    containers: Containers, carried: tuple[Path, Path], tmp_path: Path
) -> None:
    wheels, pip = carried
    out, without = tmp_path / "out", tmp_path / "without"
    rc, logs = rehearse(containers, wheels, pip, out, without)
    summary = (out / "summary.txt").read_text() if (out / "summary.txt").is_file() else ""
    print(summary)
    assert rc == 0, logs[-3000:] + summary
    assert "removed" in logs and " ultralytics-opencv-headless " in logs and " python-hostlist " in logs, logs
    # Every part ran and passed, once; then --again ran the part a kill had cut short, and only it.
    assert {p: states for p, states in notes(out).items()} == {
        **{p: ["started", "ok"] for p in PARTS},
        "tail": ["started", "ok", "started", "started", "ok"],  # killed while it ran, then again
    }
    assert "again: tail\n" in summary
    assert " CUT" not in summary and "FAILED" not in summary and "SKIPPED" not in summary, summary
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    measured = {r["part"] for r in results}
    assert measured == set(PARTS), measured
    # What each part measured, as the box would report it.
    by = {p: [r for r in results if r["part"] == p] for p in PARTS}
    assert any(r.get("torch", "").startswith("2.") and r.get("date") for r in by["env"]), by["env"]
    runs = {(r.get("run") or r.get("name"), r.get("model")) for r in by["runs"]}
    pairs = {
        (name, model) for name in ("ours", "stock", "ratio_vs_stock") for model in ("yolo11n", "yolo26n")
    }
    assert runs >= pairs, by["runs"]
    assert {r["optimizer"] for r in by["runs"] if r.get("model") == "yolo26n" and r.get("run")} == {"MuSGD"}
    assert all(r.get("added") is None and r["ok"] for r in by["env"] if "added" in r)
    assert {r["model"] for r in by["env"] if "added" in r} == {"yolo11n", "yolo26n"}
    assert {r.get("kind") for r in by["tail"]} >= {"affine", "perspective"}
    assert all(r["share_off_1"] == 0 for r in by["tail"] if "kind" in r), by["tail"]
    assert {r.get("moved") for r in by["tail"]} >= {"colour", "geometry", "mosaic+warp"}
    for model, optimizer in (("yolo11n", "SGD"), ("yolo26n", "MuSGD")):
        levers = {r.get("lever"): r for r in by["levers"] if r.get("model") == model}
        assert len(levers["eager"]["losses"]) == 3 and levers["eager"]["optimizer"] == optimizer, levers
        assert 0 < levers["eager"]["optimizer_share"] < 1 and levers["eager"]["optimizer_step_ms"] > 0
        assert set(levers) >= {"channels_last", "fused_optimizer", "cuda_graphs", "bf16"}, levers
        assert "needs CUDA" in levers["bf16"]["note"] or "requires CUDA" in levers["bf16"]["note"]
    planned = {r["model"]: r for r in by["planner"] if r.get("predicted_mib")}
    assert set(planned) == {"yolo11n", "yolo26n", "yolo26s"} and planned["yolo26n"]["optimizer"] == "MuSGD"
    assert len([r for r in by["planner"] if r.get("predicted_mib")]) == 4, by["planner"]
    assert [(r["model"], r["ok"]) for r in by["resume"]] == [("yolo11n", True), ("yolo26n", True)]
    assert "resume: epoch-stop yolo26n: TERM: exit 143" in summary
    # What comes back from the box: at most 8 files, at most 2 folders down.
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) <= MAX_FILES and all(len(p.relative_to(out).parts) <= 3 for p in files), files
    # Without the hostlist wheel: one line naming it at the import check, nothing measured.
    assert "INFO rehearsal: without the hostlist wheel: exit 1" in logs, logs[-3000:]
    stopped = (without / "summary.txt").read_text()
    assert "ERROR gpu_check: hostlist does not import" in stopped, stopped
    assert "carry the python-hostlist wheel" in stopped, stopped
    assert not (without / "results.jsonl").exists()
