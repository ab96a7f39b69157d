"""Multi-node: scheduler variables become a node spec; the deploy files run the same image and command."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from rig.errors import RigError
from rig.launch import nodes

from tests.helpers import ENTRYPOINT


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, (1, 0, None, 29500, "single")),
        (
            {"NNODES": "3", "NODE_RANK": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1234"},
            (3, 2, "a", 1234, "rig"),
        ),
        (
            {"MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "2", "RANK": "1"},
            (2, 1, "job-master-0", 23456, "kubeflow"),
        ),
        (
            {"PET_NNODES": "4", "PET_NODE_RANK": "3", "MASTER_ADDR": "m", "WORLD_SIZE": "4", "RANK": "3"},
            (4, 3, "m", 29500, "kubeflow"),
        ),
        (
            {"WORLD_SIZE": "8", "RANK": "2", "MASTER_ADDR": "m", "PET_NPROC_PER_NODE": "4"},
            (2, 2, "m", 29500, "kubeflow"),
        ),
        (
            {
                "SLURM_JOB_NUM_NODES": "2",
                "SLURM_NODEID": "1",
                "SLURM_JOB_NODELIST": "gpu[07-08]",
                "SLURM_JOB_ID": "9",
            },
            (2, 1, "gpu07", 29500, "slurm"),
        ),
    ],
)
def test_scheduler_variables_become_a_node_spec(env: dict[str, str], expected: tuple[Any, ...]) -> None:
    if env.get("PET_NPROC_PER_NODE"):
        with pytest.raises(RigError, match="not below"):  # RANK=2 of 2 nodes: a mis-set job is refused
            nodes.node_spec(env)
        return
    spec = nodes.node_spec(env)
    assert (spec.nnodes, spec.node_rank, spec.master_addr, spec.master_port, spec.source) == expected


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"NNODES": "two"}, "not a number"),
        ({"NNODES": "0"}, "too small"),
        ({"NNODES": "2", "NODE_RANK": "0"}, "no MASTER_ADDR"),
        ({"NNODES": "2", "NODE_RANK": "2", "MASTER_ADDR": "a"}, "not below"),
    ],
)
def test_bad_node_variables_are_one_line_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(RigError, match=message):
        nodes.node_spec(env)


def test_slurm_first_host() -> None:
    assert nodes.first_host("gpu[03-05,9],cpu1") == "gpu03"
    assert nodes.first_host("n1,n2") == "n1"


def test_deploy_files_run_the_same_image_and_command() -> None:
    yaml = pytest.importorskip("yaml")
    repo = ENTRYPOINT.parent
    job = yaml.safe_load((repo / "deploy/pytorchjob.yaml").read_text())
    assert job["kind"] == "PyTorchJob"
    for role in ("Master", "Worker"):
        (container,) = job["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["containers"]
        assert container["name"] == "pytorch" and container["args"][:2] == ["rig", "train"]
        assert "SYS_NICE" in container["securityContext"]["capabilities"]["add"]
    sbatch = repo / "deploy/slurm.sbatch"
    assert subprocess.run(["bash", "-n", str(sbatch)], check=False).returncode == 0
    assert "rig train" in sbatch.read_text()
