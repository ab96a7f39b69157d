"""deploy/trainjob.yaml, read strictly against Kubeflow Trainer v2's API, against what its torch plugin
does with it (tests/helpers/trainjob.py) and what rig reads from the pods' environment. It keeps
what deploy/pytorchjob.yaml has: the stop grace, the volumes, the capabilities, resume=auto."""

from __future__ import annotations

import pytest
from rig.launch import nodes

from tests.helpers import pytorchjob, trainjob


def test_the_manifest_is_a_trainjob_on_the_torch_runtime() -> None:
    job = trainjob.load()
    assert job["apiVersion"] == "trainer.kubeflow.org/v1alpha1" and job["kind"] == "TrainJob"
    assert job["spec"]["runtimeRef"] == {"name": trainjob.RUNTIME}
    assert trainjob.container(job).args[:2] == ["rig", "train"]
    assert not job["spec"]["trainer"].get("command"), "args only: the image's entrypoint stays"


def test_a_field_the_api_lacks_fails_the_strict_read() -> None:
    job = trainjob.load()
    job["spec"]["trainer"]["numNode"] = 2
    with pytest.raises(AssertionError, match=r"spec.trainer: \['numNode'\] are no fields of Trainer"):
        trainjob.check(job, "TrainJob")
    job = trainjob.load()
    patch = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    patch["template"]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["mount_path"] = "/x"
    with pytest.raises(AssertionError, match="are no fields of V1VolumeMount"):
        trainjob.check(job, "TrainJob")


def test_the_pods_find_node_0_and_the_job_named_in_its_address() -> None:
    """PET_* only: the node count, this node's rank, node 0's address under the job's service and
    port 29500; the run is the job's own, the same on every pod and across restarts."""
    job = trainjob.load()
    pods = trainjob.pods(job)
    assert [p.name for p in pods] == ["yolo-train-node-0-0", "yolo-train-node-0-1"]
    for pod in pods:
        spec = nodes.node_spec(pod.environment())
        assert (spec.nnodes, spec.node_rank, spec.master_port, spec.source) == (
            2,
            pod.rank,
            29500,
            "kubeflow",
        )
        assert spec.master_addr == "yolo-train-node-0-0.yolo-train" == trainjob.aliases(job, pods[0])[1]
        assert nodes.job_identity(pod.environment()) == "yolo-train"
    assert "resume=auto" in trainjob.container(job).args


def test_it_keeps_what_the_pytorchjob_has() -> None:
    """The same args, env, volumes, mounts, grace and capabilities as the PyTorchJob's pods."""
    v1, v2 = pytorchjob.load(), trainjob.load()
    c1, c2 = pytorchjob.container(v1), trainjob.container(v2)
    assert c1.args == c2.args and c1.image == c2.image and c1.env == c2.env
    assert c1.volume_mounts == c2.volume_mounts
    assert pytorchjob.pod_spec(v1).volumes == trainjob.pod_spec(v2).volumes
    grace = trainjob.pod_spec(v2).termination_grace_period_seconds
    assert grace == pytorchjob.pod_spec(v1).termination_grace_period_seconds == 120
    assert c1.security_context.capabilities.add == c2.security_context.capabilities.add
    assert {"SYS_NICE", "IPC_LOCK"} <= set(c2.security_context.capabilities.add)
    assert c2.resources.limits == c1.resources.limits
    annotations = v1.spec.pytorch_replica_specs["Master"].template.metadata.annotations
    assert trainjob.node(v2).annotations == annotations
