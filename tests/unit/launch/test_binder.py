"""The per-rank binder, for real in a subprocess: CPU affinity, memory policy, then exec."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from rig.launch import binding

from tests.helpers import ENTRYPOINT

PROBE = (
    "import json, os; print(json.dumps({'cpus': sorted(os.sched_getaffinity(0)), "
    "'omp': os.environ.get('OMP_NUM_THREADS'), 'rig_cpus': os.environ.get('RIG_CPUS')}))"
)


def _bind(local_rank: int, plan: list[binding.RankBinding], **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(ENTRYPOINT), "LOCAL_RANK": str(local_rank), **env}
    full.pop("OMP_NUM_THREADS", None)
    argv = [
        sys.executable,
        "-m",
        "rig.launch.binder",
        "--plan",
        binding.to_json(plan),
        "--",
        sys.executable,
        "-c",
        PROBE,
    ]
    return subprocess.run(argv, env=full, capture_output=True, text=True, timeout=60, check=False)


def test_binder_applies_its_ranks_cpus_then_execs() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    plan = [binding.RankBinding(i, None, -1, (cpu,), None) for i, cpu in enumerate(allowed[:2])]
    last = len(plan) - 1
    result = _bind(last, plan)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"cpus": [allowed[last]], "omp": "1", "rig_cpus": str(allowed[last])}
    off = _bind(last, plan, NUMA_BINDING="off")
    assert json.loads(off.stdout)["cpus"] == allowed and "NUMA_BINDING=off" in off.stderr


def test_binder_memory_policy_applies_or_warns_once_with_the_fix() -> None:
    allowed = tuple(sorted(os.sched_getaffinity(0)))
    result = _bind(0, [binding.RankBinding(0, None, 0, allowed, 0)])
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("WARNING")]
    # Either the kernel took MPOL_PREFERRED (CAP_SYS_NICE or no seccomp), or one warning says how.
    assert warnings == [] or (len(warnings) == 1 and "cap_add: [SYS_NICE]" in warnings[0])
    assert json.loads(result.stdout)["cpus"] == list(allowed)
