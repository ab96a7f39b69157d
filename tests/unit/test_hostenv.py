"""The host's variables Apptainer passes in that would break the image: dropped, each named once."""

from __future__ import annotations

import pytest
from rig import hostenv

APPTAINER = {"APPTAINER_CONTAINER": "/scratch/yolo-rig.sif", "APPTAINER_NAME": "yolo-rig.sif"}
VENV = "/opt/venv"


@pytest.mark.parametrize(
    ("given", "kept", "dropped"),
    [
        # What a cluster's login shell carries: each breaking one goes, the rest stays.
        (
            {"PYTHONPATH": "/sw/python/lib", "PYTHONHOME": "/sw/python", "CUDA_HOME": "/sw/cuda-12.4",
             "SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "1,3", "LD_PRELOAD": "/sw/xalt.so"},
            {"SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "1,3", "LD_PRELOAD": "/sw/xalt.so"},
            {"PYTHONPATH": "/sw/python/lib", "PYTHONHOME": "/sw/python", "CUDA_HOME": "/sw/cuda-12.4"},
        ),
        # Apptainer's own library folders (--nv) and the system ones its action script puts first stay;
        # what APPTAINERENV_LD_LIBRARY_PATH added goes.
        (
            {"LD_LIBRARY_PATH": "/usr/lib/x86_64-linux-gnu:/sw/nccl/lib:/.singularity.d/libs"},
            {"LD_LIBRARY_PATH": "/usr/lib/x86_64-linux-gnu:/.singularity.d/libs"},
            {"LD_LIBRARY_PATH": "/sw/nccl/lib"},
        ),
        ({"LD_LIBRARY_PATH": "/.singularity.d/libs"}, {"LD_LIBRARY_PATH": "/.singularity.d/libs"}, {}),
        ({"LD_LIBRARY_PATH": "/home/u/lib"}, {}, {"LD_LIBRARY_PATH": "/home/u/lib"}),
        # The image's own VIRTUAL_ENV stays; another is the image's again.
        ({"VIRTUAL_ENV": "/opt/venv/"}, {"VIRTUAL_ENV": "/opt/venv/"}, {}),
        ({"VIRTUAL_ENV": "/home/u/venv"}, {"VIRTUAL_ENV": VENV}, {"VIRTUAL_ENV": "/home/u/venv"}),
    ],
)  # fmt: skip
def test_under_apptainer_the_breaking_variables_go(
    given: dict[str, str], kept: dict[str, str], dropped: dict[str, str]
) -> None:
    result = hostenv.cleaned({**APPTAINER, **given}, venv=VENV)
    assert result.env == {**APPTAINER, **kept}
    assert result.dropped == dropped


def test_singularitys_name_counts_too_and_keep_keeps() -> None:
    env = {"SINGULARITY_CONTAINER": "/x.sif", "PYTHONPATH": "/sw/lib"}
    assert hostenv.cleaned(env).dropped == {"PYTHONPATH": "/sw/lib"}
    for keep in ("keep", " KEEP "):
        assert hostenv.cleaned({**env, hostenv.KEEP_ENV: keep}).env == {**env, hostenv.KEEP_ENV: keep}


def test_docker_compose_and_kubernetes_hand_over_only_what_was_asked() -> None:
    # GKE's device plugin sets LD_LIBRARY_PATH for its driver folder; a user's PYTHONPATH is theirs.
    env = {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib64", "PYTHONPATH": "/workspace/code", "PYTHONHOME": "/x"}
    assert hostenv.cleaned(env) == hostenv.Cleaned(env, {})


def test_the_line_names_each_variable_what_it_would_do_and_the_ways_out() -> None:
    text = hostenv.line({"PYTHONPATH": "/sw/lib", "CUDA_HOME": "/sw/cuda"})
    assert "PYTHONPATH=/sw/lib (the host's Python modules would be imported" in text
    assert "CUDA_HOME=/sw/cuda (torch.compile" in text
    assert "--cleanenv" in text and "RIG_HOST_ENV=keep" in text and "\n" not in text
