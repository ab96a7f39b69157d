"""The Apptainer stand-in's own rules (docker/cluster/apptainer.py), against what Apptainer's sources
say: the environment a command gets, and the runscript built from the image's ENTRYPOINT and CMD,
run here by /bin/sh as Apptainer's runs it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers.apptainer import standin

APPTAINER = standin()
IMAGE_ENV = {
    "PATH": "/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "VIRTUAL_ENV": "/opt/venv",
    "YOLO_OFFLINE": "true",
}
HOST = {
    "HOME": "/home/u", "PATH": "/sw/bin:/usr/bin", "LD_LIBRARY_PATH": "/sw/lib", "YOLO_OFFLINE": "false",
    "VIRTUAL_ENV": "/home/u/venv", "PYTHONPATH": "/sw/py", "HTTPS_PROXY": "http://proxy:3128", "EMPTY": "",
    "APPTAINER_BIND": "/scratch", "SLURM_JOB_ID": "7",
}  # fmt: skip


def environ(**kwargs: object) -> dict[str, str]:
    result: dict[str, str] = APPTAINER.container_environ(
        HOST, IMAGE_ENV, home="/home/u", image="/scratch/yolo-rig.sif", **kwargs
    )
    return result


def test_the_images_env_wins_the_hosts_passes_where_the_image_sets_nothing() -> None:
    env = environ()
    assert env["YOLO_OFFLINE"] == "true" and env["VIRTUAL_ENV"] == "/opt/venv"  # the image's ENV
    assert env["PYTHONPATH"] == "/sw/py" and env["SLURM_JOB_ID"] == "7"  # the host's, passed in
    assert env["PATH"] == IMAGE_ENV["PATH"] and env["HOME"] == "/home/u"  # never the host's PATH
    assert env["LD_LIBRARY_PATH"] == "/.singularity.d/libs"  # the host's is always left out
    assert "EMPTY" not in env and "APPTAINER_BIND" not in env  # empty ones unset; APPTAINER_* never passed
    assert env["APPTAINER_CONTAINER"] == "/scratch/yolo-rig.sif" and env["APPTAINER_NAME"] == "yolo-rig.sif"
    assert env["SINGULARITY_CONTAINER"] == "/scratch/yolo-rig.sif"


def test_apptainerenv_and_env_win_over_the_image_cleanenv_keeps_only_the_proxies() -> None:
    env = environ(env={"YOLO_OFFLINE": "maybe", "LD_LIBRARY_PATH": "/sw/nccl"})
    assert env["YOLO_OFFLINE"] == "maybe" and env["LD_LIBRARY_PATH"] == "/sw/nccl:/.singularity.d/libs"
    clean = environ(cleanenv=True)
    assert clean["HTTPS_PROXY"] == "http://proxy:3128" and clean["LANG"] == "C"
    assert "PYTHONPATH" not in clean and "SLURM_JOB_ID" not in clean
    assert APPTAINER.container_environ(
        {**HOST, "APPTAINERENV_HOME": "/elsewhere", "SINGULARITYENV_X": "s", "APPTAINERENV_X": "a"},
        IMAGE_ENV, home="/home/u", image="i.sif",
    )["HOME"] == "/home/u"  # fmt: skip


@pytest.mark.parametrize(
    ("args", "ran"),
    [
        ([], ["entry", "--", "rig", "serve"]),  # no arguments: ENTRYPOINT + CMD
        (["rig", "train", "a b", "it's"], ["entry", "--", "rig", "train", "a b", "it's"]),  # they replace CMD
        (["echo", "$HOME"], ["entry", "--", "echo", "/home/u"]),  # evaluated by the shell, as Apptainer does
    ],
)
def test_the_runscript_runs_the_entrypoint_with_the_arguments_or_the_cmd(
    tmp_path: Path, args: list[str], ran: list[str]
) -> None:
    show = tmp_path / "entry"
    show.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    show.chmod(0o755)
    script = APPTAINER.runscript([str(show), "--"], ["rig", "serve"])
    out = subprocess.run(
        ["/bin/sh", "-c", script, "runscript", *args],
        env={"HOME": "/home/u", "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout  # fmt: skip
    assert out.splitlines() == ran[1:]
