"""Jobs the way a cluster's users submit them, on the local Slurm cluster (`make test-cluster`): from
`make cluster-shell` (no USER), with `--export=NONE`, as a user whose uid is not the image's, tasks
started the way Pyxis starts them (docker/cluster/pyxis-task: the image's ENV over the job's, enroot's
PyTorch hook, no ENTRYPOINT, read-only image), two jobs at once on the same nodes, then a node lost.

Tiny runs, as in test_slurm.py: the demo dataset (32 images), imgsz 64, a total batch of 2 on two
nodes x one CPU rank.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.slurm import DATA, PROJECT, SBATCH, USER, Cluster, Job
from tests.helpers.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

RUN_TIMEOUT = 900  # generous: the ranks of two jobs share a busy 2-core host with the cluster's daemons
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}
REPO = Path(__file__).resolve().parents[2]
# Each user's runs in a folder of their own on the shared runs volume (/shared/runs is sticky, like /tmp).
PROJECT_DIR = f"/workspace/runs/{USER}"
RUNS = f"/shared/runs/{USER}"


def rig_args(name: str, epochs: int) -> str:
    return (
        f"device=cpu --cpu-ranks 1 data={DATA} model=yolo11n.yaml epochs={epochs} imgsz=64 batch=2 "
        f"project={PROJECT_DIR} name={name} resume=auto plots=False"
    )


def cluster_shell(cmd: str) -> str:
    """cmd through `make cluster-shell`, as a user types it: docker compose exec, a login shell."""
    env = {**os.environ, "CLUSTER_PROJECT": PROJECT, "CLUSTER_USER": USER}
    result = subprocess.run(
        ["make", "-s", "--no-print-directory", "cluster-shell", f"CMD={cmd}"],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def wait_ended(cluster: Cluster, job_id: str) -> Job:
    return cluster.wait_job(job_id, ENDED, RUN_TIMEOUT)


def run_dirs(cluster: Cluster, name: str) -> dict[str, str]:
    """The run folders called name, name-2... under the user's project, each with its owner file."""
    owners = "do [ -d $d ] && echo $d=$(cat $d/.rig-owner 2>/dev/null); done; true"
    out = cluster.check(f"cd {RUNS} && for d in {name} {name}-*; {owners}")
    return dict(line.split("=", 1) for line in out.split())


def node0_command(output: str) -> list[str]:
    """torchrun's command as node 0's rig train logged it (`Executing: ...`, node rank 0)."""
    for line in output.splitlines():
        if "Executing: " in line and "--node-rank 0 " in line:
            return shlex.split(line.split("Executing: ", 1)[1])
    raise AssertionError(f"no node-0 launch in the output:\n{output[-4000:]}")


def task_environ(cluster: Cluster, service: str) -> dict[str, str]:
    """The environment and uid of the launcher (torchrun) of the running job on a node."""
    cmd = (  # anchored: the pattern is in this very shell's command line too
        "p=$(pgrep -f -- '^\\S*python\\S*( -\\S+)* -m rig\\.launch\\.torchrun ' | head -n1); "
        "echo UID=$(awk '/^Uid:/ {print $2}' /proc/$p/status); tr '\\0' '\\n' </proc/$p/environ"
    )
    out = cluster.check(cmd, service=service)
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def test_pyxis_tasks_get_the_image_environment_and_enroots_hook(cluster: Cluster, docker_client: Any) -> None:
    """The shim's task start, as Pyxis does it: the image's ENV over the job's, enroot's PyTorch hook
    (RANK per task, the port from the job id), the user's home, and the image's ENTRYPOINT only with
    --container-entrypoint (the one the shim runs is the image's own)."""
    product = docker_client.images.get(os.environ.get("IMAGE", "yolo-rig:cu121"))
    shim = cluster.check("grep '^ENTRYPOINT=' /usr/local/lib/rig-cluster/pyxis-task")
    assert shim.strip() == f"ENTRYPOINT=({' '.join(product.attrs['Config']['Entrypoint'])})", shim
    out = cluster.check(
        "MASTER_PORT=1234 YOLO_CONFIG_DIR=/mine srun -N2 --ntasks-per-node=1 --container-image=x "
        "--container-env=MASTER_PORT bash -c 'echo $(hostname) $(id -u) $HOME $MASTER_ADDR $MASTER_PORT "
        "$RANK $WORLD_SIZE $YOLO_CONFIG_DIR $PATH' | sort",
        timeout=120,
    )
    uid = cluster.check("id -u").strip()
    rows = [line.split() for line in out.strip().splitlines()]
    assert [r[0] for r in rows] == ["node0", "node1"], out
    for rank, row in enumerate(rows):
        # The job's MASTER_PORT kept (--container-env), the image's YOLO_CONFIG_DIR and PATH win.
        assert row[1:] == [
            uid, f"/home/{USER}", "node0", "1234", str(rank), "2", "/workspace/.config", row[-1]
        ], out  # fmt: skip
        assert row[-1].startswith("/opt/venv/bin:"), out
    hooked = cluster.check("srun -N1 --container-image=x bash -c 'echo $SLURM_JOB_ID $MASTER_PORT'").split()
    assert int(hooked[1]) == 61000 + int(hooked[0]) % 4536, hooked
    # The ENTRYPOINT (rig exec) sets the GPU environment; without it the task has none of it.
    probe = "bash -c 'echo order=$CUDA_DEVICE_ORDER'"
    ran = cluster.check(f"srun -N1 --container-image=x --container-entrypoint {probe}")
    assert "order=PCI_BUS_ID" in ran, ran
    assert "order=\n" in cluster.check(f"srun -N1 --container-image=x {probe}") + "\n"


def test_slurm_node_lists_read_as_slurm_reads_them(cluster: Cluster) -> None:
    """rig's hostlist reader (python-hostlist, what the image has) against Slurm's own. Slurm 22.05
    refuses a suffix after the brackets (gpu[01-02]-ib), which later Slurm reads: test_nodes.py."""
    lists = ["a[1-2]b[3-4]", "n[008-010,12],cpu1", "node[0-1]", "gpu[1,3-4],gpu7", "x[9-11]"]
    for nodelist in lists:
        slurm = cluster.check(f"scontrol show hostnames {shlex.quote(nodelist)}").split()
        script = f"from rig.launch import nodes; print(' '.join(nodes.hostnames({nodelist!r})))"
        ours = cluster.check(f"python -c {shlex.quote(script)}").split()
        assert ours == slurm, (nodelist, ours, slurm)


def test_two_jobs_with_one_name_at_once_then_a_lost_node(cluster: Cluster, jobs: list[str]) -> None:
    """From `make cluster-shell` (no USER in that shell), two jobs with `name=exp` on the same two
    nodes at once, one with `--export=NONE`, one with the shell's environment: each gets its own run
    directory (exp, exp-2) that both its nodes agree on, its own rendezvous port (from the job id),
    and the final validation of its best.pt. Once the second has trained an epoch, node1 is killed
    (its slurmd and every process on it) under it: Slurm requeues it (--requeue) and, node1 back,
    resume=auto continues its own folder, not the other job's of the same name: every epoch once.
    One test for both, to keep CI short."""
    assert "USER=" not in cluster_shell("env")
    # Side by side: half the GPUs and CPUs each, the nodes shared (the sbatch asks --exclusive).
    share = "--gpus-per-node=2 --cpus-per-task=16 --oversubscribe"
    submitted = []
    for export, epochs in (("--export=NONE", 2), ("", 4)):
        out = cluster_shell(f"sbatch --parsable {export} {share} {SBATCH} {rig_args('exp', epochs)}")
        submitted.append(out.strip().split(";")[0])
    jobs.extend(submitted)
    first, second = submitted
    wait_until(lambda: all(cluster.job(j).state == "RUNNING" for j in submitted), timeout=120, interval=1)
    wait_until(lambda: len(run_dirs(cluster, "exp")) == 2, timeout=RUN_TIMEOUT, interval=1)
    env = task_environ(cluster, "node1")
    dirs = run_dirs(cluster, "exp")
    # Owners: slurm:CLUSTER:JOB.STEP, the sbatch's training step.
    owners = {d: re.fullmatch(r"slurm:yolo-rig:(\d+)\.\d+", owner) for d, owner in dirs.items()}
    assert sorted(dirs) == ["exp", "exp-2"] and all(owners.values()), dirs
    own = {m.group(1): d for d, m in owners.items() if m}
    assert sorted(own) == sorted(submitted), dirs
    second_run = f"{RUNS}/{own[second]}"
    # node1 is lost once the second job has an epoch behind it and three ahead (the first, shorter,
    # may be running still or done: requeued too, or not, each must end with its own epochs once).
    wait_until(lambda: len(cluster.results_epochs(second_run)) >= 1, timeout=RUN_TIMEOUT, interval=1)
    assert cluster.job(second).state == "RUNNING" and len(cluster.results_epochs(second_run)) < 4, "too late"
    node1 = cluster.container("node1")
    node1.kill()
    try:
        wait_until(lambda: cluster.job(second).state != "RUNNING", timeout=240, interval=1)
    finally:
        node1.start()
    done = wait_ended(cluster, first)
    out = cluster.output(first)
    assert done.state == "COMPLETED" and done.fields.get("NodeList") == "node[0-1]", (
        done.fields,
        out[-4000:],
    )
    later = wait_ended(cluster, second)
    outputs = [out, cluster.output(second)]
    assert later.state == "COMPLETED" and later.restarts >= 1, (later.fields, outputs[1][-4000:])
    assert "resume=auto: continuing" in outputs[1], outputs[1][-4000:]
    # As Pyxis starts a task: the submitting user's uid (not the image's 1000), the image's PATH,
    # enroot's hook variables.
    assert env["UID"] == cluster.check("id -u").strip() != "1000", env
    assert env["PATH"].startswith("/opt/venv/bin:") and env["PYTORCH_VERSION"], env
    assert {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR"} <= env.keys(), env
    # Ports from the job ids.
    ports = {int(node0_command(o)[node0_command(o).index("--master-port") + 1]) for o in outputs}
    assert ports == {61000 + int(j) % 4536 for j in submitted}, ports
    for job_id, output, epochs in zip(submitted, outputs, (2, 4), strict=True):
        run = own[job_id]
        assert f"Validating {PROJECT_DIR}/{run}/weights/best.pt" in output, output[-4000:]
        assert "final validation skipped" not in output, output[-4000:]
        # Nothing wrote into the image (read-only on the nodes) or failed; the second job's /metrics
        # port is taken by the first's, a WARNING that does not stop it.
        failed = re.search(r"^ERROR |Read-only file system|Permission denied", output, re.MULTILINE)
        assert failed is None, output[-4000:]
        assert cluster.results_epochs(f"{RUNS}/{run}") == list(range(1, epochs + 1)), output[-4000:]
    assert run_dirs(cluster, "exp") == dirs  # the requeued job made no folder of its own
    print(json.dumps({"restarts": later.restarts, "ports": sorted(ports)}))


STEPS_SCRIPT = f"""#!/bin/bash
#SBATCH --nodes=2 --ntasks-per-node=1 --output=steps-%j.out
set -u
ARGS="{rig_args("steps", 1)} workers=0"
step() {{ srun -N1 -n1 --container-image=x --container-workdir=/workspace rig train $ARGS; }}
step & step & wait
echo "INFO steps: the later step"
step
"""


def test_two_steps_at_once_get_two_folders_and_a_later_one_finds_the_run_finished(
    cluster: Cluster, jobs: list[str]
) -> None:
    """One job, two `srun rig train` steps at once with one name=: each its own folder, owned by its
    step; a third step after them, resume=auto, finds the run finished: one line, nothing trained."""
    cluster.check(f"cat > steps.sbatch <<'EOF'\n{STEPS_SCRIPT}EOF")
    job_id = cluster.check("sbatch --parsable steps.sbatch").strip().split(";")[0]
    jobs.append(job_id)
    job = wait_ended(cluster, job_id)
    _, out = cluster.run(f"cat steps-{job_id}.out")
    assert job.state == "COMPLETED", (job.fields, out[-4000:])
    dirs = run_dirs(cluster, "steps")
    assert sorted(dirs) == ["steps", "steps-2"], (dirs, out[-4000:])
    steps = {re.fullmatch(rf"slurm:yolo-rig:{job_id}\.(\d+)", owner) for owner in dirs.values()}
    assert None not in steps and len({m.group(1) for m in steps if m}) == 2, dirs
    later = out.split("INFO steps: the later step", 1)[1]
    finished = [line for line in later.splitlines() if "is finished" in line and "nothing to train" in line]
    assert len(finished) == 1 and f"{PROJECT_DIR}/steps" in finished[0], later[-4000:]
    assert "Starting training" not in later, later[-4000:]
    assert run_dirs(cluster, "steps") == dirs  # the later step made no folder
