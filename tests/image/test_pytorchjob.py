"""deploy/pytorchjob.yaml as the training operator runs it, and deploy/trainjob.yaml as Kubeflow Trainer
v2 runs it, without Kubernetes: two containers of the image started as the job's pods (names, host
names and the DNS names the job's service gives them, the manifest's args with the entrypoint kept,
the container's env then the operator's, its volumes), which train together over CPU ranks (gloo),
with their loader workers. Deleted mid-run (TERM to each pod's PID 1, as the kubelet sends it), they
save inside the epoch and exit 143; the pods started again (the operator's restart) continue there.

For CPUs and a small run, the test changes only what it must: `--gpus=all` becomes `device=cpu` with
RIG_CPU_RANKS=1, and the data, model, epochs, imgsz and batch are the demo's, tiny.
"""

from __future__ import annotations

import contextlib
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import pytorchjob, trainjob
from tests.helpers.containers import Containers
from tests.helpers.names import unique
from tests.helpers.waiting import wait_until

pytestmark = [pytest.mark.image, pytest.mark.slow]

TINY = {
    "data": "/datasets/demo/data.yaml",
    "model": "yolo11n.yaml",
    "epochs": "4",
    "imgsz": "64",
    "batch": "2",
    "plots": "False",
}


def cpu_args(args: list[str], epochs: int) -> list[str]:
    """The manifest's args on CPU ranks, with the tiny run's values in place of its own."""
    tiny = {**TINY, "epochs": str(epochs)}
    out = []
    for arg in args:
        if arg.startswith("--gpus"):
            out.append("device=cpu")
            continue
        key = arg.partition("=")[0]
        out.append(f"{key}={tiny[key]}" if key in tiny else arg)
    out += [f"{k}={v}" for k, v in tiny.items() if not any(a.startswith(f"{k}=") for a in args)]
    return out


@dataclass(frozen=True)
class Job:
    """A manifest and the helper that makes its pods (tests/helpers/pytorchjob.py, trainjob.py, one
    shape), and the tiny run's length: the TrainJob's is shorter, the stop and the restart the same."""

    kind: Any
    epochs: int


@pytest.fixture(params=[Job(pytorchjob, 4), Job(trainjob, 3)], ids=["pytorchjob", "trainjob"])
def kubeflow(request: pytest.FixtureRequest) -> Job:
    return request.param  # type: ignore[no-any-return]


def _users_removed(docker_client: Any, filters: dict[str, str]) -> None:
    """The containers (the pods) that use a volume or a network, removed before it: a volume a
    stopped container still names cannot be removed. The `containers` fixture removes them too, but
    after these fixtures, which the tests ask for after it."""
    for container in docker_client.containers.list(all=True, filters=filters):
        with contextlib.suppress(Exception):
            container.remove(force=True, v=True)


@pytest.fixture
def network(docker_client: Any) -> Iterator[Any]:
    net = docker_client.networks.create(unique("net"))
    try:
        yield net
    finally:
        _users_removed(docker_client, {"network": net.name})
        with contextlib.suppress(Exception):
            net.remove()


@pytest.fixture
def claims(docker_client: Any, kubeflow: Job) -> Iterator[dict[str, str]]:
    """One Docker volume per persistentVolumeClaim, shared by the pods as the claims are."""
    made: dict[str, Any] = {}
    tag = unique()
    for volume in kubeflow.kind.pod_spec(kubeflow.kind.load()).volumes:
        if volume.persistent_volume_claim:
            made[volume.name] = docker_client.volumes.create(
                f"{tag}-{volume.persistent_volume_claim.claim_name}"
            )
    try:
        yield {name: v.name for name, v in made.items()}
    finally:
        for v in made.values():
            _users_removed(docker_client, {"volume": v.name})
            with contextlib.suppress(Exception):
                v.remove(force=True)


def pod_mounts(
    kind: Any, job: Any, claims: dict[str, str], secret_dir: Path
) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """The pod's volumeMounts: claims as the shared volumes, emptyDir as the pod's own tmpfs (the
    memory-backed /dev/shm is Docker's own, sized by the caller), a Secret as a read-only folder of
    its keys (a generated token under secret_dir/NAME, as `kubectl create secret` would hold one)."""
    volumes = {v.name: v for v in kind.pod_spec(job).volumes}
    binds: dict[str, dict[str, str]] = {}
    tmpfs: dict[str, str] = {}
    for mount in kind.container(job).volume_mounts:
        volume = volumes[mount.name]
        if volume.persistent_volume_claim:
            # The runs claim as a provisioner makes it, root's (the manifest's RIG_USER=root trusts
            # only root's folders above its runs): Kubernetes never fills a claim from the image, as
            # Docker would copy the image's yolo-owned /workspace/runs there (nocopy). The datasets
            # claim keeps Docker's copy: the test's data is written into it as yolo.
            nocopy = ",nocopy" if mount.mount_path == "/workspace/runs" else ""
            binds[claims[mount.name]] = {"bind": mount.mount_path, "mode": f"rw{nocopy}"}
        elif volume.empty_dir is not None and mount.mount_path != "/dev/shm":
            tmpfs[mount.mount_path] = ""
        elif volume.secret is not None:
            folder = secret_dir / volume.secret.secret_name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "token").write_text(secrets.token_hex(32))
            for p in (secret_dir, folder, folder / "token"):
                p.chmod(0o755 if p.is_dir() else 0o644)
            binds[str(folder)] = {"bind": mount.mount_path, "mode": "ro"}
    return binds, tmpfs


def test_two_pods_train_together_as_the_operator_starts_them(
    containers: Containers, network: Any, claims: dict[str, str], tmp_path: Path, kubeflow: Job
) -> None:
    kind, epochs = kubeflow.kind, kubeflow.epochs
    job = kind.load()
    binds, tmpfs = pod_mounts(kind, job, claims, tmp_path / "secrets")
    c = kind.container(job)
    caps = list((c.security_context.capabilities.add or []) if c.security_context else [])
    rc, out = containers.oneshot(
        ["rig", "demo-data", "/datasets/demo", "--train", "32", "--val", "4", "--imgsz", "64"],
        volumes=binds,
        timeout=300,
    )
    assert rc == 0, out
    project = next(a.partition("=")[2] for a in c.args if a.startswith("project="))
    csv = f"{project}/{kind.run_name(job)}/results.csv"

    def start(attempt: int) -> list[Any]:
        started = []
        for pod in kind.pods(job):
            env = {**pod.environment(), "RIG_CPU_RANKS": "1"}
            started.append(
                containers.run(
                    cpu_args(pod.args, epochs),
                    name=f"{unique()}-{pod.name}-{attempt}",
                    hostname=pod.name,
                    environment=env,
                    volumes=binds,
                    tmpfs=tmpfs,
                    cap_add=caps,
                    shm_size="1g",
                    network=network.name,
                    networking_config={
                        network.name: containers.client.api.create_endpoint_config(
                            aliases=kind.aliases(job, pod)
                        )
                    },
                )
            )
        return started

    # `kubectl delete` once the first epoch is done: TERM to every pod's PID 1.
    pods = start(1)
    one_epoch = f"test $(tail -n +2 {csv} 2>/dev/null | wc -l) -ge 1"
    wait_until(lambda: pods[0].exec_run(["sh", "-c", one_epoch]).exit_code == 0, timeout=900, interval=1)
    for p in pods:
        p.kill(signal="SIGTERM")
    codes = [int(p.wait(timeout=300)["StatusCode"]) for p in pods]
    logs = [p.logs().decode(errors="replace") for p in pods]
    assert codes == [143, 143], "\n\n".join(log[-4000:] for log in logs)
    for log in logs:
        assert "DataLoader worker" not in log and "Traceback" not in log, log[-4000:]
    stop = re.search(rf"INFO trainer: stop: \S+ continues at (epoch \d/{epochs} at batch \d+/\d+)", logs[0])
    assert stop, logs[0][-4000:]

    # The operator starts the pods again: resume=auto continues inside the epoch.
    started = start(2)
    codes = [int(p.wait(timeout=1200)["StatusCode"]) for p in started]
    logs = [p.logs().decode(errors="replace") for p in started]
    assert codes == [0, 0], "\n\n".join(log[-4000:] for log in logs)
    for log in logs:
        assert "world: 2 ranks = 2 nodes x 1 rank per node (cpu, gloo)" in log, log[-4000:]
        assert f"weights/last.pt at {stop.group(1)}" in log, log[-4000:]  # resume=auto, on both pods

    # The run is named after the job (resume=auto finds it again after a restart): each epoch once.
    # As the pods' user (the manifest's RIG_USER=root): run folders are private to whoever trains.
    rc, out = containers.oneshot(["cat", csv], volumes=binds, timeout=120, environment={"RIG_USER": "root"})
    assert rc == 0, out
    trained = [int(float(line.split(",")[0])) for line in out.splitlines()[1:] if line.strip()]
    assert trained == list(range(1, epochs + 1)), out
