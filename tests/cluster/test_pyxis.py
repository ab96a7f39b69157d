"""Tasks started as Pyxis starts them, where sites differ: a site's LD_PRELOAD and LD_LIBRARY_PATH
(an XALT-like library the job preloads), enroot's PyTorch hook missing (it is an extra a site's admin
installs), the image's ENTRYPOINT once per node. The stand-in is docker/cluster/pyxis-task; the tasks
run as the cluster's user, whose uid is not the image's.
"""

from __future__ import annotations

import re
import shlex
import uuid
from collections.abc import Iterator

import pytest

from tests.helpers.slurm import DATA, USER, Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

HOOK = "/etc/enroot/hooks.d/50-slurm-pytorch.sh"
HOME = f"/home/{USER}"
# A site's preloaded library (as XALT is): its constructor notes every process it is loaded into.
PRELOAD_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void note(void) {
    const char *path = getenv("SITE_PRELOAD_NOTES");
    FILE *f = path ? fopen(path, "a") : NULL;
    if (f) { fprintf(f, "%d\n", (int)getpid()); fclose(f); }
}
"""


@pytest.fixture
def without_hook(cluster: Cluster) -> Iterator[None]:
    """Both nodes without enroot's PyTorch hook, as on a site that never installed it."""
    nodes = ("node0", "node1")
    saved = {n: cluster.check(f"cat {HOOK}", service=n, user="root") for n in nodes}
    for node in nodes:
        cluster.check(f"rm {HOOK}", service=node, user="root")
    try:
        yield
    finally:
        for node, text in saved.items():
            cluster.check(f"printf %s {shlex.quote(text)} > {HOOK}", service=node, user="root")


def test_a_sites_preload_reaches_the_tasks_and_rig_trains_without_the_hook(
    cluster: Cluster, without_hook: None
) -> None:
    site = f"{HOME}/site"
    cluster.check(
        f"mkdir -p {site}/lib && rm -f {site}/notes && printf %s {shlex.quote(PRELOAD_C)} > {site}/note.c "
        f"&& gcc -shared -fPIC -o {site}/lib/libnote.so {site}/note.c"
    )
    env = f"LD_PRELOAD={site}/lib/libnote.so LD_LIBRARY_PATH={site}/lib SITE_PRELOAD_NOTES={site}/notes"
    shown = "$(hostname) $LD_PRELOAD $LD_LIBRARY_PATH $HOME $RANK ${WORLD_SIZE:-none} ${MASTER_ADDR:-none}"
    probe = f"bash -c 'echo {shown}'"
    out = cluster.check(f"{env} srun -N2 --ntasks-per-node=1 --container-image=x {probe} | sort")
    rows = [line.split() for line in out.strip().splitlines()]
    lib = f"{site}/lib/libnote.so"
    # The job's preload and library path reach the task; without the hook no MASTER_ADDR or
    # WORLD_SIZE, but RANK still (Pyxis' own, with PYTORCH_VERSION in the image).
    assert rows == [
        ["node0", lib, f"{site}/lib", HOME, "0", "none", "none"],
        ["node1", lib, f"{site}/lib", HOME, "1", "none", "none"],
    ], out
    # rig trains on both nodes with the site's library in every process, from Slurm's own variables.
    name = f"preloaded-{uuid.uuid4().hex[:6]}"
    train = (
        f"rig train device=cpu --cpu-ranks 1 data={DATA} model=yolo11n.yaml epochs=1 imgsz=64 batch=2 "
        f"project=/workspace/runs/{USER} name={name} plots=False val=False"
    )
    rc, log = cluster.run(f"{env} srun -N2 --ntasks-per-node=1 --container-image=x {train}", timeout=600)
    assert rc == 0, log[-4000:]
    assert cluster.results_epochs(f"/shared/runs/{USER}/{name}") == [1], log[-4000:]
    notes = cluster.check(f"wc -l < {site}/notes").strip()
    assert int(notes) >= 6, notes  # on each node: rig, torchrun and the rank (each a new program)


def test_the_entrypoint_runs_once_per_node_and_its_environment_reaches_every_task(cluster: Cluster) -> None:
    probe = "bash -c 'echo $RANK $LOCAL_RANK order=$CUDA_DEVICE_ORDER $SLURM_JOB_ID.$SLURM_STEP_ID'"
    out = cluster.check(
        f"srun -N1 --nodelist=node0 --ntasks-per-node=2 --container-image=x --container-entrypoint {probe}"
    )
    # The tasks' lines (tini, not PID 1 where the entrypoint runs once, is quiet as a subreaper).
    rows = sorted(line.split() for line in out.splitlines() if re.match(r"\d+ \d+ order=", line))
    assert [r[:3] for r in rows] == [["0", "0", "order=PCI_BUS_ID"], ["1", "1", "order=PCI_BUS_ID"]], out
    step = rows[0][3]
    uid = cluster.check("id -u").strip()
    runs = cluster.check(f"cat /tmp/pyxis-stand-in-{uid}/{step}.0.entrypoint-runs", service="node0")
    assert runs.split() == ["node0"], runs  # two tasks, one entrypoint
    # Without --container-entrypoint, nothing of it.
    plain = cluster.check(f"srun -N1 --nodelist=node0 --container-image=x {probe}")
    assert "order= " in plain, plain


def test_another_users_premade_state_folder_is_refused_and_never_used(cluster: Cluster) -> None:
    """B (uid 2002) makes /tmp/pyxis-stand-in-<A's uid> on node0 first, 0777, with the environment
    files of A's next steps preloading B's library: A's task is refused in one line and nothing of B's
    reaches any process of A's. Then, B's folder gone, A's own is made private and the task runs."""
    uid = cluster.check("id -u").strip()
    planted = f"/tmp/pyxis-stand-in-{uid}"
    site = "/tmp/bobs-site"
    env = f"LD_PRELOAD={site}/libnote.so\\0SITE_PRELOAD_NOTES={site}/notes\\0"
    try:
        cluster.check(
            f"rm -rf {planted} {site} && mkdir -p {site} "
            f"&& printf %s {shlex.quote(PRELOAD_C)} > {site}/note.c "
            f"&& gcc -shared -fPIC -o {site}/libnote.so {site}/note.c "
            f"&& : > {site}/notes && chmod 0666 {site}/notes "
            f"&& mkdir -m 0777 {planted} && chmod 0777 {planted} "
            # the environment file of every step 0 of the job ids to come, as B would guess them
            f"&& for j in $(seq 1 10000); do printf '{env}' > {planted}/$j.0.0.env; done "
            f"&& chown -R 2002:2002 {site} {planted}",
            service="node0",
            user="root",
        )
        rc, out = cluster.run("srun -N1 --nodelist=node0 --container-image=x bash -c 'echo ran $LD_PRELOAD'")
        assert rc != 0 and "ran" not in out, out
        refused = [line for line in out.splitlines() if line.startswith("ERROR pyxis-task:")]
        assert len(refused) == 1 and f"{planted} is not a folder of uid {uid}" in refused[0], out
        assert cluster.check(f"cat {site}/notes", service="node0", user="root") == ""  # B's code ran nowhere
        cluster.check(f"rm -rf {planted}", service="node0", user="root")
        out = cluster.check(
            "srun -N1 --nodelist=node0 --container-image=x bash -c 'echo ran ${LD_PRELOAD:-none}'"
        )
        assert "ran none" in out, out
        mode = cluster.check(f"stat -c '%u %a' {planted}", service="node0", user="root").split()
        assert mode == [uid, "700"], mode
    finally:
        cluster.run(f"rm -rf {planted} {site}", service="node0", user="root")
