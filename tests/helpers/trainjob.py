"""deploy/trainjob.yaml read strictly, and the pods Kubeflow Trainer v2 (2.2-2.3) would make of it on the
`torch-distributed` ClusterTrainingRuntime: the runtime's `node` replicated job, patched by the
TrainJob's runtimePatches, its container configured by the torch plugin (EnforceMLPolicy) and its
pods named as JobSet names them. The same shape as tests/helpers/pytorchjob.py, so the image test
runs both.

Strict: every key is one the v2 API (pkg/apis/trainer/v1alpha1/trainjob_types.go) or Kubernetes'
own models (the kubernetes client's attribute maps, nested types followed) knows, so a typo or a
field of another version fails here, as the API server would refuse it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.helpers.pytorchjob import Pod

MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "trainjob.yaml"
RUNTIME = "torch-distributed"
REPLICATED_JOB = "node"  # the runtime's replicated job, and its container (constants.Node)
CONTAINER = "node"
PORT = 29500  # constants.ContainerTrainerPort: PET_MASTER_PORT, the port the plugin declares
RESERVED = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")

# The v2 API's own types, as far as a TrainJob spells them (trainjob_types.go, v2.3.0); a
# Kubernetes type by its client model's name.
_API: dict[str, dict[str, str]] = {
    "TrainJob": {"apiVersion": "str", "kind": "str", "metadata": "V1ObjectMeta", "spec": "TrainJobSpec"},
    "TrainJobSpec": {
        "runtimeRef": "RuntimeRef", "initializer": "object", "trainer": "Trainer",
        "runtimePatches": "list[RuntimePatch]", "suspend": "bool", "activeDeadlineSeconds": "int",
        "managedBy": "str",
    },
    "RuntimeRef": {"name": "str", "apiGroup": "str", "kind": "str"},
    "Trainer": {
        "image": "str", "command": "list[str]", "args": "list[str]", "env": "list[V1EnvVar]",
        "numNodes": "int", "resourcesPerNode": "V1ResourceRequirements", "numProcPerNode": "int",
    },
    "RuntimePatch": {"manager": "str", "time": "str", "trainingRuntimeSpec": "TrainingRuntimeSpecPatch"},
    "TrainingRuntimeSpecPatch": {"template": "JobSetTemplatePatch"},
    "JobSetTemplatePatch": {"metadata": "V1ObjectMeta", "spec": "JobSetSpecPatch"},
    "JobSetSpecPatch": {"replicatedJobs": "list[ReplicatedJobPatch]"},
    "ReplicatedJobPatch": {"name": "str", "template": "JobTemplatePatch"},
    "JobTemplatePatch": {"metadata": "V1ObjectMeta", "spec": "JobSpecPatch"},
    "JobSpecPatch": {"template": "PodTemplatePatch"},
    "PodTemplatePatch": {"metadata": "V1ObjectMeta", "spec": "PodSpecPatch"},
    "PodSpecPatch": {
        "serviceAccountName": "str", "volumes": "list[V1Volume]", "initContainers": "list[ContainerPatch]",
        "containers": "list[ContainerPatch]", "imagePullSecrets": "list[V1LocalObjectReference]",
        "securityContext": "V1PodSecurityContext", "nodeSelector": "dict(str, str)",
        "affinity": "V1Affinity", "tolerations": "list[V1Toleration]",
        "schedulingGates": "list[V1PodSchedulingGate]", "terminationGracePeriodSeconds": "int",
    },
    "ContainerPatch": {
        "name": "str", "env": "list[V1EnvVar]", "volumeMounts": "list[V1VolumeMount]",
        "securityContext": "V1SecurityContext",
    },
}  # fmt: skip
_SCALARS = {"str", "int", "bool", "object", "float", "datetime"}


def check(value: Any, kind: str, where: str = "") -> None:
    """value has only the fields `kind` has (recursively), or AssertionError naming the path."""
    from kubernetes import client

    if kind.startswith("list["):
        assert isinstance(value, list), f"{where}: a list"
        for i, item in enumerate(value):
            check(item, kind[5:-1], f"{where}[{i}]")
        return
    if kind.startswith("dict("):
        assert isinstance(value, dict), f"{where}: a map"
        for k, v in value.items():
            check(v, re.sub(r"^dict\(str, (.*)\)$", r"\1", kind), f"{where}.{k}")
        return
    if kind in _SCALARS or (kind not in _API and not hasattr(client, kind)):
        return  # a scalar, a quantity (IntOrString), a date: the API server parses those
    if kind in _API:
        fields = _API[kind]
    else:
        model = getattr(client, kind)
        fields = {model.attribute_map[a]: t for a, t in model.openapi_types.items()}
    assert isinstance(value, dict), f"{where}: an object ({kind})"
    unknown = sorted(set(value) - set(fields))
    assert not unknown, f"{where or kind}: {unknown} are no fields of {kind}"
    for key, item in value.items():
        check(item, fields[key], f"{where}.{key}" if where else key)


def _object(value: Any, kind: str) -> Any:
    """A Kubernetes model from its manifest form, by the kubernetes client's own deserializer."""
    from kubernetes.client import ApiClient

    return ApiClient()._ApiClient__deserialize(value, kind)  # type: ignore[attr-defined]


def load(path: Path = MANIFEST) -> dict[str, Any]:
    job = yaml.safe_load(path.read_text())
    check(job, "TrainJob")
    return job


@dataclass(frozen=True)
class Node:
    """The `node` replicated job's pod as the TrainJob patches it."""

    spec: Any  # V1PodSpec: the volumes, the grace period and the `node` container
    annotations: dict[str, str]


def _patch(job: dict[str, Any]) -> dict[str, Any]:
    """The pod template patch of the `node` replicated job (one manager's)."""
    found = []
    for patch in job["spec"].get("runtimePatches", []):
        for rjob in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
            if rjob["name"] == REPLICATED_JOB:
                found.append(rjob["template"]["spec"]["template"])
    assert len(found) == 1, f"one runtime patch of the {REPLICATED_JOB!r} replicated job, not {len(found)}"
    return found[0]


def node(job: dict[str, Any]) -> Node:
    """The pod: the runtime's `node` container (image, args, env from the trainer; the patch's
    mounts and security context), the patch's volumes and grace period."""
    patch = _patch(job)
    spec = patch.get("spec", {})
    trainer = job["spec"]["trainer"]
    containers = [c for c in spec.get("containers", []) if c["name"] == CONTAINER]
    assert [c["name"] for c in spec.get("containers", [])] == [CONTAINER], (
        "the runtime has one container, node"
    )
    container = {
        "name": CONTAINER,
        "image": trainer["image"],
        "args": trainer.get("args", []),
        "env": trainer.get("env", []),
        "resources": trainer.get("resourcesPerNode", {}),
        "ports": [{"containerPort": PORT}],
        **{k: v for k, v in containers[0].items() if k != "name"},
    }
    pod = {
        "containers": [container],
        "volumes": spec.get("volumes", []),
        "terminationGracePeriodSeconds": spec.get("terminationGracePeriodSeconds"),
    }
    return Node(_object(pod, "V1PodSpec"), dict(patch.get("metadata", {}).get("annotations", {})))


def container(job: dict[str, Any]) -> Any:
    return node(job).spec.containers[0]


def pod_spec(job: dict[str, Any]) -> Any:
    return node(job).spec


def name(job: dict[str, Any]) -> str:
    return str(job["metadata"]["name"])


def master(job: dict[str, Any]) -> str:
    """PET_MASTER_ADDR: node 0's pod under the JobSet's headless service (both named for the job)."""
    return f"{name(job)}-{REPLICATED_JOB}-0-0.{name(job)}"


def _nproc(trainer: dict[str, Any]) -> str:
    if "numProcPerNode" in trainer:
        return str(trainer["numProcPerNode"])
    limits = trainer.get("resourcesPerNode", {}).get("limits", {})
    if any(str(k).endswith("/gpu") for k in limits):
        return "auto"
    return str(max(1, int(str(limits.get("cpu", "1")))))


def pods(job: dict[str, Any]) -> list[Pod]:
    """Node 0 first, as the Job controller starts them: `<job>-node-0-<index>` (host name, and the
    DNS name under the job's service), the trainer's env then the plugin's (upserted after it), then
    the Job controller's JOB_COMPLETION_INDEX."""
    trainer = job["spec"]["trainer"]
    own = [(e["name"], str(e.get("value", ""))) for e in trainer.get("env", [])]
    assert not {n for n, _ in own} & set(RESERVED), f"the API refuses {RESERVED} in trainer.env"
    count = int(trainer.get("numNodes", 1))
    made = []
    for index in range(count):
        plugin = [
            ("PET_NNODES", str(count)),
            ("PET_NPROC_PER_NODE", _nproc(trainer)),
            ("PET_NODE_RANK", str(index)),  # the pod's job-completion-index annotation
            ("PET_MASTER_ADDR", master(job)),
            ("PET_MASTER_PORT", str(PORT)),
            ("JOB_COMPLETION_INDEX", str(index)),
        ]
        host = f"{name(job)}-{REPLICATED_JOB}-0-{index}"
        made.append(Pod(host, REPLICATED_JOB, index, list(trainer.get("args", [])), own + plugin))
    return made


def run_name(job: dict[str, Any]) -> str:
    """The run folder resume=auto continues: train-<job>."""
    return f"train-{name(job)}"


def aliases(job: dict[str, Any], pod: Pod) -> list[str]:
    """The names the pod answers to on the cluster network: its host name and its DNS name under the
    job's headless service (which is what PET_MASTER_ADDR names)."""
    return [pod.name, f"{pod.name}.{name(job)}"]
