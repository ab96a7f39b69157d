"""Multi-node: scheduler variables become a node spec; the deploy files run the same image and command."""

from __future__ import annotations

import dataclasses
import logging
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
            (2, 1, "gpu07", 61009, "slurm"),  # the port from the job id: 61000 + 9 % 4536
        ),
        (  # Slurm's hostlist syntax: a suffix after the brackets, padding kept
            {"SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "gpu[01-02]-ib"},
            (2, 0, "gpu01-ib", 29500, "slurm"),
        ),
        (  # an `srun -N1` step inside a two-node allocation is one node: the step's variables win
            {
                "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_ID": "5",
                "SLURM_STEP_NUM_NODES": "1", "SLURM_NNODES": "1", "SLURM_STEP_NODELIST": "n2",
                "SLURM_NODEID": "0",
            },
            (1, 0, None, 61005, "slurm"),
        ),
        (  # the step's node list, not the job's: node 0 of the step hosts the store
            {
                "SLURM_JOB_NUM_NODES": "3", "SLURM_JOB_NODELIST": "n[1-3]", "SLURM_JOB_ID": "5",
                "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NODELIST": "n[2-3]", "SLURM_NODEID": "1",
            },
            (2, 1, "n2", 61005, "slurm"),
        ),
        (  # enroot's PyTorch hook (Pyxis): its WORLD_SIZE/RANK count tasks; Slurm's variables decide
            {
                "SLURM_JOB_NUM_NODES": "2", "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NUM_TASKS": "2",
                "SLURM_NODEID": "1", "SLURM_JOB_ID": "43", "SLURM_STEP_NODELIST": "node[0-1]",
                "MASTER_ADDR": "node0", "MASTER_PORT": "61043", "WORLD_SIZE": "2", "RANK": "1",
                "LOCAL_RANK": "0",
            },
            (2, 1, "node0", 61043, "slurm"),
        ),
        (  # MASTER_PORT and MASTER_ADDR the job sets win over the job id and the node list
            {
                "SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "n[1-2]",
                "SLURM_JOB_ID": "42", "MASTER_PORT": "29411", "MASTER_ADDR": "n1-ib",
            },
            (2, 0, "n1-ib", 29411, "slurm"),
        ),
    ],
)  # fmt: skip
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
        ({"NNODES": "two"}, "^NNODES='two': use a whole number >= 1$"),
        ({"NNODES": "0"}, "^NNODES='0': use a whole number >= 1$"),
        ({"NNODES": "2", "NODE_RANK": "0"}, "no MASTER_ADDR"),
        ({"NNODES": "2", "NODE_RANK": "2", "MASTER_ADDR": "a"}, "not below"),
        ({"SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "gpu[01-"}, "cannot read SLURM_JOB_NODELIST"),
        (
            {"SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NUM_TASKS": "8", "SLURM_STEP_NODELIST": "n[1-2]"},
            r"Slurm started 8 tasks on 2 node\(s\); rig train wants one task per node "
            r"\(srun --ntasks-per-node=1\)",
        ),
    ],
)
def test_bad_node_variables_are_one_line_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(RigError, match=message):
        nodes.node_spec(env)


@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        ("gpu[03-05,9],cpu1", ["gpu03", "gpu04", "gpu05", "gpu9", "cpu1"]),
        ("gpu[01-02]-ib", ["gpu01-ib", "gpu02-ib"]),
        ("a[1-2]b[3-4]", ["a1b3", "a1b4", "a2b3", "a2b4"]),
        ("n[008-010]", ["n008", "n009", "n010"]),
        ("n1,n2", ["n1", "n2"]),
    ],
)
def test_slurm_node_lists_in_slurms_syntax(nodelist: str, hosts: list[str]) -> None:
    # The same lists through Slurm's own `scontrol show hostnames`: tests/cluster/test_slurm_nodes.py.
    assert nodes.hostnames(nodelist) == hosts


# Kubeflow Trainer v2's torch plugin: PET_* only, the master `<job>-node-0-0.<job>`, port 29500.
def trainjob_env(job: str, rank: int, nnodes: int = 2, master: str | None = None) -> dict[str, str]:
    return {
        "PET_NNODES": str(nnodes), "PET_NPROC_PER_NODE": "auto", "PET_NODE_RANK": str(rank),
        "PET_MASTER_ADDR": master or f"{job}-node-0-0.{job}", "PET_MASTER_PORT": "29500",
        "JOB_COMPLETION_INDEX": str(rank),
    }  # fmt: skip


def test_a_trainjobs_variables_become_a_node_spec_named_for_the_job() -> None:
    for rank in (0, 1):
        spec = nodes.node_spec(trainjob_env("yolo-train", rank))
        assert (spec.nnodes, spec.node_rank, spec.master_addr, spec.master_port, spec.source) == (
            2, rank, "yolo-train-node-0-0.yolo-train", 29500, "kubeflow",
        )  # fmt: skip
        assert spec.rdzv_id == "yolo-train"


@pytest.mark.parametrize(
    ("environ", "identity"),
    [
        (trainjob_env("yolo-train", 1), "yolo-train"),
        (trainjob_env("a", 0, 1), "a"),
        (trainjob_env("node-0-0", 0), "node-0-0"),  # the suffix in the job's own name
        (trainjob_env("job2", 1, master="job2-node-0-0.job2.team-a.svc.cluster.local"), "job2"),
        (trainjob_env("x", 1, master="x-node-0-0.y"), None),  # not one job's pod and service
        (trainjob_env("x", 1, master="x-node-0-1.x"), None),  # not the first node's
        (trainjob_env("x", 1, master="10.0.0.5"), None),
        # The training operator (v1): the master pod `<job>-master-0`, PET_* and MASTER_ADDR.
        ({"PET_NNODES": "2", "PET_MASTER_ADDR": "a-master-0", "MASTER_ADDR": "a-master-0"}, "a"),
        ({"MASTER_ADDR": "x-node-0-0.x", "NNODES": "2"}, None),  # our own variables: no scheduler's job
    ],
)
def test_the_job_identity_of_kubeflows_jobs(environ: dict[str, str], identity: str | None) -> None:
    assert nodes.job_name(environ) == identity
    assert nodes.job_identity(environ) == identity


def test_the_port_comes_from_the_job_id_as_enroots_hook_computes_it() -> None:
    env = {"SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "n[1-2]"}
    ports = [nodes.node_spec({**env, "SLURM_JOB_ID": job}).master_port for job in ("42", "43", "4578")]
    assert ports == [61042, 61043, 61042]  # 61000 + id % 4536: ids 4536 apart share one
    assert nodes.node_spec({**env, "SLURM_JOB_ID": "42", "MASTER_PORT": "29500"}).master_port == 29500


@pytest.mark.parametrize(
    ("addr", "resolved", "fails"),
    [
        ("localhost", ["127.0.0.1", "::1"], True),
        ("node0", ["127.0.1.1"], True),  # Debian/Ubuntu's /etc/hosts entry for the host's own name
        ("127.0.0.1", ["127.0.0.1"], True),
        ("node0", ["10.0.0.5"], False),
        ("node0", ["127.0.1.1", "10.0.0.5"], False),  # one address other nodes can reach
        ("gpu01", [], False),  # does not resolve here: the rendezvous says so if it never does
    ],
)
def test_several_nodes_with_a_loopback_master_is_one_line(
    addr: str, resolved: list[str], fails: bool
) -> None:
    spec = nodes.NodeSpec(2, 0, addr, 29500, "r", "rig")
    if not fails:
        nodes.check_master(spec, resolved)
        return
    with pytest.raises(RigError) as e:
        nodes.check_master(spec, resolved)
    assert f"{addr} resolves to {', '.join(resolved)} here, the loopback" in str(e.value)
    assert "set MASTER_ADDR to node 0's routable host name" in str(e.value)
    nodes.check_master(nodes.NodeSpec(1, 0, addr, 29500, "r", "rig"), resolved)  # one node: its own loopback


def test_localhost_resolves_to_the_loopback() -> None:
    assert nodes.resolve("localhost") and all(a in {"127.0.0.1", "::1"} for a in nodes.resolve("localhost"))
    assert nodes.resolve("no-such-host.invalid") == []


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


def _proc(tmp_path: Any, text: str | None) -> Any:
    """A fake root whose /proc/sys/net/ipv4/ip_local_port_range holds text (None: no such file)."""
    if text is not None:
        path = tmp_path / nodes.EPHEMERAL_RANGE
        path.parent.mkdir(parents=True)
        path.write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    ("text", "found"),
    [("32768\t60999\n", (32768, 60999)), ("1024 65535", (1024, 65535)), ("garbage", None), (None, None)],
)
def test_the_ephemeral_range_is_read_from_proc(tmp_path: Any, text: str | None, found: Any) -> None:
    assert nodes.ephemeral_ports(_proc(tmp_path, text)) == found


def test_a_rendezvous_port_inside_the_ephemeral_range_is_a_warning() -> None:
    linux = (32768, 60999)
    enroot3 = nodes.node_spec(
        {"SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_ID": "7",
         "MASTER_PORT": str(7 % 16384 + 49152)}  # what enroot 3.x's hook sets
    )  # fmt: skip
    said = nodes.port_warning(enroot3, linux)
    assert said is not None and "49159 is inside this node's ephemeral range 32768-60999" in said, said
    enroot4 = dataclasses.replace(enroot3, master_port=nodes.slurm_port("7") or 0)  # 61007: above it
    assert nodes.port_warning(enroot4, linux) is None
    assert nodes.port_warning(enroot3, (61000, 65535)) is None  # a site's own range
    assert nodes.port_warning(dataclasses.replace(enroot3, nnodes=1), linux) is None  # one node: port 0
    assert nodes.port_warning(dataclasses.replace(enroot3, node_rank=1), linux) is None  # binds nothing
    assert nodes.port_warning(enroot3, None) is None


def test_rig_train_warns_once_of_an_ephemeral_port(tmp_path: Any, caplog: Any, monkeypatch: Any) -> None:
    """The whole decision of a two-node Slurm launch, the node's range read from a fake /proc."""
    import rig
    from rig.launch import job, trainplan

    from tests.helpers.fakesys import FakeSys

    FakeSys(tmp_path / "sys").node(0, "0-3").online("0-3")
    env = {
        "PATH": "/usr/bin:/bin", "SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "0",
        "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_ID": "7", "MASTER_PORT": "49159",
        "MASTER_ADDR": "203.0.113.7",
    }  # fmt: skip
    monkeypatch.setattr(logging.getLogger("rig"), "level", logging.INFO)
    kv = [
        "device=cpu",
        "data=x.yaml",
        "model=m.yaml",
        f"project={tmp_path}/runs",
        "name=exp",
        "exist_ok=True",
    ]
    request = trainplan.parse(kv, gpus=None, cpu_ranks_given="1", environ=env)
    for text, warned in (("32768 60999", 1), ("1024 40000", 0)):
        caplog.clear()
        root = tmp_path / f"root-{warned}"
        node = trainplan.discover(
            env, lambda: job.topology(str(tmp_path / "sys")), rig.USER_ENVIRON, proc_root=_proc(root, text)
        )
        trainplan.decide(request, node, trainplan.discover_run(request.args, node))
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert len([w for w in warnings if "ephemeral range" in w]) == warned, warnings
