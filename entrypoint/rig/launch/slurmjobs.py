"""Slurm's jobs as the owners of run folders: who a task is (its cluster, job and step, written in
the owner file, rig.launch.rundir) and whether the owner of a folder still runs, asked of Slurm.

A run folder belongs to one training step of one job on one cluster: two clusters sharing a file
system (or a cluster whose job ids started again) never take each other's folders, and two
`srun rig train` steps of one job get two. A job submitted again with the same name= and
resume=auto continues a folder whose owner no longer runs: squeue says so (a requeued job waiting in
the queue still runs, as far as its folder goes). Where Slurm cannot be asked (no squeue in the
container, no answer in time) nothing is taken: rig starts a new folder and says why.

`parse` and `classify` are pure; `ask` runs squeue, bounded by a timeout, never waiting on input.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

PREFIX = "slurm:"
LEGACY_PREFIX = "slurm-"  # the owner files of rig before the cluster and the step: slurm-JOBID
SQUEUE_TIMEOUT_S = 10.0
# squeue's states of a job that is over: its processes are gone, nothing writes into its folder.
ENDED = frozenset(
    {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
     "PREEMPTED", "TIMEOUT", "REVOKED", "SPECIAL_EXIT"}
)  # fmt: skip
ALIVE, GONE, UNKNOWN = "alive", "gone", "unknown"


@dataclass(frozen=True)
class Owner:
    """A training step of a Slurm job, as an owner file names it."""

    cluster: str  # SLURM_CLUSTER_NAME; "": not known (an older owner file)
    job: str
    step: str = ""  # SLURM_STEP_ID; "": rig train outside srun, or an older owner file

    @property
    def identity(self) -> str:
        return f"{PREFIX}{self.cluster}:{self.job}" + (f".{self.step}" if self.step else "")

    @property
    def legacy(self) -> bool:
        return not self.cluster and not self.step

    def describe(self) -> str:
        where = f" on cluster {self.cluster}" if self.cluster else ""
        return f"job {self.job}" + (f" step {self.step}" if self.step else "") + where


def from_environ(environ: Mapping[str, str]) -> Owner | None:
    """This task's owner: Slurm's cluster, job and step; None outside a Slurm job."""
    job = environ.get("SLURM_JOB_ID", "").strip()
    if not job.isdigit():
        return None
    step = environ.get("SLURM_STEP_ID", "").strip()
    cluster = environ.get("SLURM_CLUSTER_NAME", "").strip()
    return Owner(cluster if _token(cluster) else "", job, step if _token(step) else "")


def _token(value: str) -> bool:
    return bool(value) and not any(c in value for c in ":. \t\n/")


def parse(identity: str | None) -> Owner | None:
    """An owner file's Slurm owner: slurm:CLUSTER:JOB[.STEP], or an older rig's slurm-JOB (its
    cluster and step unknown); None for any other owner (a PyTorchJob, a launch by hand...)."""
    text = (identity or "").strip()
    if text.startswith(LEGACY_PREFIX) and text[len(LEGACY_PREFIX) :].isdigit():
        return Owner("", text[len(LEGACY_PREFIX) :])
    if not text.startswith(PREFIX):
        return None
    cluster, sep, rest = text[len(PREFIX) :].partition(":")
    job, _, step = rest.partition(".")
    if not sep or not job.isdigit() or (cluster and not _token(cluster)) or (step and not _token(step)):
        return None
    return Owner(cluster, job, step)


def classify(owner: Owner, me: Owner, rc: int, out: str) -> str:
    """Whether owner still runs, from squeue's answer about its job (`squeue -h -t all -j JOB -o %T`)
    or, for another step of this very job, about the job's steps (`squeue -h -s -j JOB -o %i`):
    ALIVE, GONE, or UNKNOWN (squeue failed for another reason than a job it no longer knows)."""
    text = out.strip()
    if rc != 0:
        return GONE if "invalid job id" in text.lower() else UNKNOWN
    if owner.job == me.job and owner.step != me.step:
        return ALIVE if f"{owner.job}.{owner.step}" in text.split() else GONE
    states = {s.split()[0].rstrip("+") for s in text.splitlines() if s.strip()}
    return ALIVE if states - ENDED else GONE


def query(owner: Owner, me: Owner) -> list[str]:
    """The squeue command that tells whether owner still runs."""
    if owner.job == me.job and owner.step != me.step:
        return ["squeue", "-h", "-s", "-j", owner.job, "-o", "%i"]
    return ["squeue", "-h", "-t", "all", "-j", owner.job, "-o", "%T"]


Runner = Callable[[Sequence[str], float], tuple[int, str]]


def run_squeue(argv: Sequence[str], timeout: float) -> tuple[int, str]:
    """argv run with no input, its output and errors together; Slurm's own timeout failure as rc 124."""
    if shutil.which(argv[0]) is None:
        return 127, f"{argv[0]} is not on PATH here"
    try:
        done = subprocess.run(
            list(argv), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]} gave no answer in {timeout:.0f} s"
    except OSError as e:
        return 126, f"{argv[0]} cannot run ({e.strerror or e})"
    return done.returncode, done.stdout + done.stderr


@dataclass(frozen=True)
class Verdict:
    state: str  # ALIVE, GONE or UNKNOWN
    why: str  # for a line: what Slurm said, or why it could not be asked


def verdict(owner: Owner, me: Owner, run: Runner = run_squeue, timeout: float = SQUEUE_TIMEOUT_S) -> Verdict:
    """Whether the owner of a folder still runs. Another cluster's job is never this one's to take;
    an older owner file of this very job (no step, no cluster: rig before them) is its own."""
    if owner.cluster and me.cluster and owner.cluster != me.cluster:
        return Verdict(ALIVE, f"a job of cluster {owner.cluster}, not of this one ({me.cluster})")
    if owner.legacy and owner.job == me.job:
        return Verdict(GONE, "this job's own folder, from an older rig")
    if owner == me:
        return Verdict(ALIVE, "this very step")
    argv = query(owner, me)
    rc, out = run(argv, timeout)
    state = classify(owner, me, rc, out)
    said = out.strip().splitlines()[-1] if out.strip() else f"exit {rc}"
    return Verdict(state, f"`{' '.join(argv)}`: {said}" if state == UNKNOWN else said)
