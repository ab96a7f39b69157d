"""The local Slurm cluster (`make cluster-up`, docker/cluster/) as tests drive it: commands as the
cluster's user (not the image's yolo: Pyxis starts tasks as whoever submits) on the submit host, jobs
submitted with the repository's sbatch, their state from `scontrol`."""

from __future__ import annotations

import os
import re
import shlex
import time
from dataclasses import dataclass
from typing import Any

import pytest

# `make test-cluster CLUSTER_PROJECT=...` tests a second cluster started beside the first.
PROJECT = os.environ.get("CLUSTER_PROJECT", "yolo-rig-cluster")
USER = os.environ.get("CLUSTER_USER", "alice")  # the Makefile's CLUSTER_USER: who submits the jobs
SBATCH = "/opt/rig/deploy/slurm.sbatch"
# The demo dataset cluster-up writes on the shared file system, as the nodes see it.
DATA = "/datasets/demo/data.yaml"
PROJECT_DIR = "/workspace/runs/detect"
RUNS = "/shared/runs/detect"  # the same folder, as the submit host sees it


@dataclass
class Job:
    id: str
    fields: dict[str, str]

    @property
    def state(self) -> str:
        return self.fields.get("JobState", "")

    @property
    def restarts(self) -> int:
        return int(self.fields.get("Restarts", "0"))


class Cluster:
    """The compose project's containers, found by their compose labels."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def container(self, service: str) -> Any:
        found = self.client.containers.list(
            all=True,
            filters={
                "label": [f"com.docker.compose.project={PROJECT}", f"com.docker.compose.service={service}"]
            },
        )
        if not found:
            pytest.fail(f"no {service} container of compose project {PROJECT}; run `make cluster-up`")
        return found[0]

    def run(
        self, cmd: str, service: str = "controller", timeout: int = 120, user: str = USER
    ) -> tuple[int, str]:
        """cmd in a login shell (the submit host's environment), bounded by coreutils timeout."""
        argv = ["timeout", str(timeout), "bash", "-lc", cmd]
        result = self.container(service).exec_run(
            argv, user=user, workdir="/" if user == "root" else f"/home/{user}"
        )
        return int(result.exit_code), result.output.decode(errors="replace")

    def check(self, cmd: str, service: str = "controller", timeout: int = 120, user: str = USER) -> str:
        rc, out = self.run(cmd, service, timeout, user)
        assert rc == 0, f"{cmd!r} on {service} exited {rc}:\n{out}"
        return out

    def submit(self, train_args: str, *sbatch_options: str, **env: str) -> str:
        """The repository's sbatch, unmodified, with TRAIN_ARGS (and env); returns the job id."""
        options = " ".join(shlex.quote(o) for o in sbatch_options)
        exported = ["ALL", *(f"{k}={v}" for k, v in env.items()), f"TRAIN_ARGS={train_args}"]
        export = shlex.quote(",".join(exported))
        out = self.check(f"sbatch --parsable --export={export} {options} {SBATCH}")
        return out.strip().split(";")[0]

    def job(self, job_id: str) -> Job:
        out = self.check(f"scontrol show job {job_id}")
        fields = dict(re.findall(r"(\w+)=(\S*)", out))
        return Job(job_id, fields)

    def output(self, job_id: str) -> str:
        rc, out = self.run(f"cat yolo-train-{job_id}.out")
        return out if rc == 0 else ""

    def wait_job(self, job_id: str, states: set[str], timeout: float) -> Job:
        """Poll until the job is in one of states; fail with its output otherwise."""
        deadline = time.monotonic() + timeout
        job = self.job(job_id)
        while job.state not in states:
            if time.monotonic() > deadline:
                pytest.fail(
                    f"job {job_id} still {job.state} after {timeout:.0f}s (waiting for {sorted(states)}):\n"
                    f"{self.output(job_id)[-4000:]}"
                )
            time.sleep(1)
            job = self.job(job_id)
        return job

    def results_epochs(self, run_dir: str) -> list[int]:
        """The epoch column of results.csv (1-based), in order; [] when there is none yet."""
        rc, out = self.run(f"cat {run_dir}/results.csv")
        if rc != 0:
            return []
        lines = [line for line in out.splitlines()[1:] if line.strip()]
        return [int(float(line.split(",")[0])) for line in lines]
