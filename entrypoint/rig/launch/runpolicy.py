"""Which run folder a `rig train` trains in, and what it resumes: the policy, from the node's facts.

    seen = discover(args, facts)                  # its folders and their owners, the checkpoints
    auto = auto_resume(args, seen, facts.identity)  # resume=auto: continue, start, or nothing to do
    run = folder(seen, facts.identity, exist_ok)    # otherwise: the folder a fresh run claims
    run = reserve(run, auto.take)                   # writes: the claim (a dry run skips it)

The mechanics live beside it: rig.launch.rundir (a folder claimed with its owner, found again, taken
over), rig.launch.autoresume (what a last.pt says), rig.launch.slurmjobs (whether an owner still runs)
and rig.launch.resumecopy (a checkpoint opened once through checked folders). The policy: one folder
per job on every node (the job's own, found again on a restart); the user's exist_ok=True, or
resume=auto outside a scheduler's job, is project/name as it is; resume=auto with the same name in a
new Slurm job continues the first folder whose owner no longer runs, else this job gets a new one,
with one line saying why.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rig import log, safefs
from rig.errors import RigError
from rig.launch import autoresume, resumecopy, rundir, slurmjobs, trainargs

_logger = log.get("launch")


@dataclass(frozen=True)
class Facts:
    """What the node says about where runs go (read once by rig.launch.trainplan.discover)."""

    runs_dir: Path
    default_name: str  # train, or the job's train-<job>
    identity: str | None  # the job's, which owns its run folder (rig.launch.nodes.job_identity)
    found: trainargs.Found  # the demo dataset, yolo11n.pt, Ultralytics' defaults
    environ: Mapping[str, str]  # the launch's: whom a run folder may trust (rig.safefs.trust)


@dataclass(frozen=True)
class Seen:
    """What is there for the run the request names."""

    located: trainargs.Located
    existing: list[rundir.Existing]  # its folders (name, name-2...) with their owners
    owners: dict[str, slurmjobs.Verdict]  # resume=auto in a Slurm job: whether other jobs' still run
    state: autoresume.RunState | None  # resume=auto: the last.pt of the folder it would continue
    newest_last: Path | None  # resume=True without a checkpoint: the newest last.pt of the runs
    checkpoint: resumecopy.Checked | None = None  # resume=True's checkpoint, opened once and checked


def newest_last(runs_dir: Path) -> Path | None:
    """The newest last*.pt of the user's own runs under runs_dir (rig.launch.rundir.own_checkpoints:
    another user's, or one another user could have changed, is never a candidate)."""
    found = sorted(rundir.own_checkpoints(runs_dir), key=os.path.getctime)
    return found[-1] if found else None


def resumed_checkpoint(args: Mapping[str, str]) -> Path | None:
    """The checkpoint resume=PATH or resume=True model=PATH names; None: no resume, or resume=True
    without a checkpoint (rig takes the newest of the user's own runs)."""
    resume = trainargs.resume_of(args)
    if isinstance(resume, str):
        return None if resume.lower() == "auto" else Path(resume)
    model = args.get("model", "")
    return Path(model) if resume is True and model.endswith(".pt") else None


def discover(args: Mapping[str, str], facts: Facts) -> Seen:
    """The run's folders and, for resume=auto, the state of the one it would continue: the job's own
    (a scheduler's job), or project/name (outside one). A resumed checkpoint is opened here, once,
    through checked folders (rig.launch.resumecopy): what the ranks load."""
    where = trainargs.locate(
        args, runs_dir=facts.runs_dir, default_name=facts.default_name, found=facts.found
    )
    rundir.check_name(where.name)
    who = safefs.trust(facts.environ)
    rundir.check_project(where.project)
    checkpoint = None
    if (named := resumed_checkpoint(args)) is not None:
        checkpoint = resumecopy.open_checked(named, who)
    newest = newest_last(facts.runs_dir) if where.newest_last_wanted else None
    if newest is not None:
        checkpoint = resumecopy.open_checked(newest, who)
    existing = rundir.scan(where.project, where.name)
    state, owners = None, {}
    if where.auto_resume:
        owners = owner_verdicts(existing, facts.identity)
        state = autoresume.read_state(_folder(where, existing, facts.identity, auto=True, owners=owners).path)
    elif args.get("exist_ok", "").strip().lower() == "true" and trainargs.resume_of(args) is False:
        rundir.check_run_dir(where.project / where.name)
    return Seen(where, existing, owners, state, newest, checkpoint)


def owner_verdicts(
    existing: Sequence[rundir.Existing], identity: str | None, run: slurmjobs.Runner = slurmjobs.run_squeue
) -> dict[str, slurmjobs.Verdict]:
    """resume=auto in a Slurm job: for each folder of the run another Slurm job (or step) owns,
    whether that owner still runs (squeue, rig.launch.slurmjobs); {} outside Slurm."""
    me = slurmjobs.parse(identity)
    if me is None:
        return {}
    out: dict[str, slurmjobs.Verdict] = {}
    for e in existing:
        owner = slurmjobs.parse(e.owner) if e.problem is None and e.owner != identity else None
        if owner is not None and e.owner is not None and e.owner not in out:
            out[e.owner] = slurmjobs.verdict(owner, me, run)
    return out


@dataclass(frozen=True)
class RunDir:
    """The run's folder: decided (a dry run prints it), then claimed by `reserve`."""

    path: Path
    claim: bool  # a new folder, or the job's own: rundir.claim takes it; False: used as it is
    identity: str | None
    name: str  # the name the sequence name, name-2... starts from
    takeable: tuple[str, ...] = ()  # owners that no longer run: their folders may be taken over
    take_from: str | None = None  # the owner whose folder this is, taken over (rundir.choose)


def _folder(
    where: trainargs.Located,
    existing: list[rundir.Existing],
    identity: str | None,
    *,
    auto: bool = False,
    exist_ok: bool = False,
    owners: Mapping[str, slurmjobs.Verdict] | None = None,
) -> RunDir:
    """The run's folder: project/name as it is for the user's exist_ok=True, or for resume=auto
    outside a scheduler's job; else the job's own, or (resume=auto: the same name submitted again)
    the first one whose owner no longer runs, or the first free name (claimed later)."""
    if exist_ok or (auto and identity is None):
        return RunDir(where.project / where.name, False, identity, where.name)
    verdicts = owners or {}
    takeable = tuple(o for o, v in verdicts.items() if v.state == slurmjobs.GONE) if auto else ()
    choice = rundir.choose(where.project, where.name, existing, identity, takeable)
    return RunDir(choice.path, True, identity, where.name, takeable, choice.take_from)


def folder(seen: Seen, identity: str | None, *, exist_ok: bool) -> RunDir:
    """The folder a run that resumes no checkpoint trains in (not resume=auto's: `auto_resume`)."""
    return _folder(seen.located, seen.existing, identity, exist_ok=exist_ok)


def folder_note(
    folder: RunDir, existing: Sequence[rundir.Existing], owners: Mapping[str, slurmjobs.Verdict]
) -> tuple[bool, str] | None:
    """resume=auto in a Slurm job: why this folder and not the run's earlier ones, as (a WARNING?,
    the line); None when there is nothing to say."""
    if folder.take_from is not None:
        return False, (
            f"resume=auto: {folder.path} is {_who(folder.take_from)}'s, which no longer runs "
            f"({owners[folder.take_from].why}): this job takes it over"
        )
    others = [(e, owners[e.owner]) for e in existing if e.owner is not None and e.owner in owners]
    others = [(e, v) for e, v in others if e.path != folder.path]
    unknown = [(e, v) for e, v in others if v.state == slurmjobs.UNKNOWN]
    if unknown:
        e, v = unknown[0]
        return True, (
            f"resume=auto: cannot ask Slurm whether {_who(e.owner)} (the owner of {e.path}) still runs "
            f"({v.why}): trained in {folder.path} instead; where squeue cannot run in the container, "
            f"continue that run with resume=True model={e.path / 'weights' / 'last.pt'}"
        )
    if others:
        busy = ", ".join(f"{e.path.name} ({_who(e.owner)}: {v.why})" for e, v in others)
        return False, f"resume=auto: not taking over {busy}: this job trains in {folder.path}"
    return None


def _who(owner: str | None) -> str:
    parsed = slurmjobs.parse(owner)
    return parsed.describe() if parsed else str(owner)


@dataclass(frozen=True)
class AutoResume:
    """resume=auto decided: the arguments without it (resume=True model=its last.pt to continue), the
    folder a fresh run claims, or the one a continued run takes over; done: why nothing is to train."""

    args: dict[str, str]
    folder: RunDir | None = None
    take: RunDir | None = None
    done: str | None = None


def auto_resume(args: Mapping[str, str], seen: Seen, identity: str | None) -> AutoResume:
    """resume=auto: the folder's last.pt continued (resume=True), a fresh run in the folder, or why
    there is nothing to train; the folder chosen and why, said in one line."""
    auto = _folder(seen.located, seen.existing, identity, auto=True, owners=seen.owners)
    if note := folder_note(auto, seen.existing, seen.owners):
        (_logger.warning if note[0] else _logger.info)("%s", note[1])
    rest = {k: v for k, v in args.items() if k != "resume"}
    last = auto.path / "weights" / "last.pt"
    decision = autoresume.decide(auto.path, seen.state or autoresume.RunState(last, exists=False))
    if decision.kind == "finished":
        return AutoResume(rest, done=decision.message)
    _logger.info("%s", decision.message)
    if decision.kind == "resume":
        take = auto if auto.take_from is not None else None
        return AutoResume({**rest, "resume": "True", "model": str(last)}, take=take)
    return AutoResume(rest, folder=auto)


def checkpoint(seen: Seen, resuming: bool) -> resumecopy.Checked | None:
    """What a resume loads, as discovery opened and checked it: resume=auto's last.pt, or resume=True's."""
    if not resuming:
        return None
    return seen.state.checked if seen.located.auto_resume and seen.state else seen.checkpoint


def reserve(run: RunDir | None, take: RunDir | None) -> RunDir | None:
    """Claim the run's folder (rig.launch.rundir): the one decided, or, when another launch took that
    name meanwhile, the next; the nodes of one job all end in the same. take: a folder resumed from
    its last.pt, taken over from a job that no longer runs: it must be this job's before the ranks start."""
    if take is not None:
        if rundir.claim(take.path.parent, take.name, take.identity, None, take.takeable) != take.path:
            raise RigError(
                f"resume=auto: another job took over {take.path} meanwhile; submit this one again "
                "to continue the next folder of the run, or give another name="
            )
        return run
    if run is None:
        return run
    if not run.claim:
        rundir.make_run_dir(run.path)
        return run
    path = rundir.claim(run.path.parent, run.name, run.identity, None, run.takeable)
    if path != run.path:  # another launch took the name between the decision and the claim
        _logger.info("run directory: %s (%s was taken meanwhile)", path, run.path.name)
    return dataclasses.replace(run, path=path, claim=False)
