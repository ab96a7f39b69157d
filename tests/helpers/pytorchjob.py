"""deploy/pytorchjob.yaml read with Kubeflow's own models (kubeflow-training), and the pods the
training operator (v1.8-1.9, `setPodEnv` and its master env generator) would make of it: their names,
host names, args and environment, in the operator's order."""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "pytorchjob.yaml"
CONTAINER = "pytorch"  # the container the operator configures (PytorchJobDefaultContainerName)
PORT_NAME = "pytorchjob-port"  # the port it reads MASTER_PORT from (PytorchJobDefaultPortName)
OPERATOR_DEFAULT_PORT = 23456  # what its defaulter declares when the container names no port


class _Response:
    """The shape ApiClient.deserialize reads: a body in `data`."""

    def __init__(self, body: Any) -> None:
        self.data = json.dumps(body)


def load(path: Path = MANIFEST) -> Any:
    """The manifest as a KubeflowOrgV1PyTorchJob (an unknown field or a wrong type fails here)."""
    from kubeflow.training import models
    from kubeflow.training.api_client import ApiClient

    return ApiClient().deserialize(
        _Response(yaml.safe_load(path.read_text())), models.KubeflowOrgV1PyTorchJob
    )


def container(job: Any, replica: str = "Master") -> Any:
    spec = job.spec.pytorch_replica_specs[replica]
    found = [c for c in spec.template.spec.containers if c.name == CONTAINER]
    assert found, f"{replica}: no container named {CONTAINER!r}; the operator configures only that one"
    return found[0]


def master_port(job: Any) -> int:
    """The port the operator hands out as MASTER_PORT: the master's `pytorchjob-port`."""
    for port in container(job).ports or []:
        if port.name == PORT_NAME:
            return int(port.container_port)
    return OPERATOR_DEFAULT_PORT


def parse_quantity(quantity: str) -> Decimal:
    """A Kubernetes quantity ('200Gi') in bytes, by the kubernetes client's own rule."""
    from kubernetes.utils import parse_quantity as parse

    return Decimal(parse(quantity))


@dataclass(frozen=True)
class Pod:
    name: str  # <job>-<replica type>-<index>, also its host name
    replica: str
    rank: int
    args: list[str]
    env: list[tuple[str, str]]  # the container's env, then the operator's, in order

    def environment(self) -> dict[str, str]:
        """What the process sees: a later entry of a name wins (as in the kubelet)."""
        return dict(self.env)


def pods(job: Any) -> list[Pod]:
    """The master, then the workers, as the operator starts them."""
    name = job.metadata.name
    specs = job.spec.pytorch_replica_specs
    total = sum(int(s.replicas or 1) for s in specs.values())
    nproc = job.spec.nproc_per_node or "auto"
    per_node = int(nproc) if str(nproc).isdigit() else 1
    master = f"{name}-master-0"
    port = str(master_port(job))
    made: list[Pod] = []
    for replica in ("Master", "Worker"):
        if replica not in specs:
            continue
        c = container(job, replica)
        for index in range(int(specs[replica].replicas or 1)):
            rank = index + 1 if replica == "Worker" else index
            own = [(e.name, e.value) for e in c.env or []]
            operator = [
                ("PYTHONUNBUFFERED", "0"),
                ("MASTER_PORT", port),
                ("PET_MASTER_PORT", port),
                ("MASTER_ADDR", master),
                ("PET_MASTER_ADDR", master),
                ("WORLD_SIZE", str(total * per_node)),
                ("RANK", str(rank)),
                ("PET_NPROC_PER_NODE", str(nproc)),
                ("PET_NODE_RANK", str(rank)),
                ("PET_NNODES", str(total)),
            ]
            made.append(
                Pod(f"{name}-{replica.lower()}-{index}", replica, rank, list(c.args or []), own + operator)
            )
    return made


# The shape tests/helpers/trainjob.py shares, so the image test runs both jobs.
def pod_spec(job: Any) -> Any:
    """The pods' V1PodSpec (the master's; the workers share it)."""
    return job.spec.pytorch_replica_specs["Master"].template.spec


def run_name(job: Any) -> str:
    """The run folder resume=auto continues: train-<job>."""
    return f"train-{job.metadata.name}"


def aliases(job: Any, pod: Pod) -> list[str]:
    """The names the pod answers to on the cluster network: the operator's service per pod."""
    return [pod.name]
