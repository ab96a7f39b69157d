"""The repository's sbatch with an Apptainer image (IMAGE=....sif): `srun apptainer run --nv IMAGE rig
train` on both nodes, through the stand-in (docker/cluster/apptainer.py: the job's environment under
the image's, the image's ENTRYPOINT around the command, as the cluster's user on the nodes' read-only
root), ends in one run folder."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.helpers.apptainer import standin
from tests.helpers.slurm import DATA, USER, Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def test_the_stand_ins_entrypoint_and_cmd_are_the_images(docker_client: Any, image: str) -> None:
    config = docker_client.images.get(image).attrs["Config"]
    module = standin()
    assert (config["Entrypoint"], config["Cmd"]) == (module.ENTRYPOINT, module.CMD)


def test_the_sbatch_trains_on_two_nodes_through_apptainer(cluster: Cluster, jobs: list[str]) -> None:
    name = f"apptainer-{uuid.uuid4().hex[:6]}"
    args = (
        f"device=cpu --cpu-ranks 1 data={DATA} model=yolo11n.yaml epochs=1 imgsz=64 batch=2 "
        f"project=/workspace/runs/{USER} name={name} plots=False val=False"
    )
    job = cluster.submit(args, IMAGE="/shared/yolo-rig.sif")
    jobs.append(job)
    done = cluster.wait_job(job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, timeout=600)
    out = cluster.output(job)
    assert done.state == "COMPLETED", out[-4000:]
    # Both nodes through Apptainer's path: its --nv warning (no GPU here), rig's places line.
    assert out.count("WARNING: Could not find any nv files on this host!") == 2, out[-4000:]
    assert out.count("INFO exec: the image's folders are read-only here") == 2, out[-4000:]
    assert "world: 2 ranks = 2 nodes x 1 rank per node" in out, out[-4000:]
    folders = cluster.check(f"ls /shared/runs/{USER}").split()
    assert [f for f in folders if f.startswith(name)] == [name], folders  # one folder for both nodes
    assert cluster.results_epochs(f"/shared/runs/{USER}/{name}") == [1], out[-4000:]
