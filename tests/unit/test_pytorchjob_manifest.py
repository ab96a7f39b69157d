"""deploy/pytorchjob.yaml, read with Kubeflow's models, against what the training operator does
with it (tests/helpers/pytorchjob.py) and what rig reads from the pods' environment."""

from __future__ import annotations

from rig.launch import nodes

from tests.helpers import pytorchjob


def test_the_manifest_deserialises_with_kubeflows_models() -> None:
    job = pytorchjob.load()
    assert job.kind == "PyTorchJob" and job.api_version == "kubeflow.org/v1"
    assert set(job.spec.pytorch_replica_specs) == {"Master", "Worker"}


def test_the_rendezvous_port_is_the_one_the_operator_hands_out() -> None:
    """The operator appends MASTER_PORT from the container port `pytorchjob-port` after the
    container's env, so an env MASTER_PORT is dead and an undeclared port is 23456."""
    job = pytorchjob.load()
    assert pytorchjob.master_port(job) == 29500, "declare the container port pytorchjob-port"
    own = {e.name for e in pytorchjob.container(job).env or []}
    assert not own & {"MASTER_PORT", "MASTER_ADDR", "WORLD_SIZE", "RANK"}, "the operator sets these"
    for pod in pytorchjob.pods(job):
        spec = nodes.node_spec(pod.environment())
        assert (spec.nnodes, spec.node_rank, spec.master_port) == (2, pod.rank, 29500)
        assert spec.master_addr == "yolo-train-master-0"


def test_the_node_cache_fits_its_empty_dir() -> None:
    """RIG_CACHE_MAX_GB (GiB) no larger than the cache emptyDir's sizeLimit: over it the kubelet
    evicts the pod."""
    job = pytorchjob.load()
    spec = job.spec.pytorch_replica_specs["Master"].template.spec
    # RIG_USER=root: root's caches live in its home (rig.yolo.nodecache.imagecache.ROOT_CACHE).
    mount = next(m for m in pytorchjob.container(job).volume_mounts if m.mount_path == "/root/.cache")
    volume = next(v for v in spec.volumes if v.name == mount.name)
    limit = pytorchjob.parse_quantity(volume.empty_dir.size_limit)
    env = dict((e.name, e.value) for e in pytorchjob.container(job).env)
    assert "RIG_CACHE_MAX_GB" in env
    assert float(env["RIG_CACHE_MAX_GB"]) * 2**30 <= limit


def test_restarted_pods_resume_the_same_run() -> None:
    """A failed pod is restarted (OnFailure, a bounded backoffLimit) and continues its run."""
    job = pytorchjob.load()
    assert all(s.restart_policy == "OnFailure" for s in job.spec.pytorch_replica_specs.values())
    assert 0 < job.spec.run_policy.backoff_limit <= 10
    assert "resume=auto" in pytorchjob.container(job).args
    names = {nodes.job_name(pod.environment()) for pod in pytorchjob.pods(job)}
    assert names == {"yolo-train"}
