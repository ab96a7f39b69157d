"""The host's environment where a runtime passes it in: the variables that would break the image.

Apptainer (and Singularity before it) hands the container the environment of the shell that started
it; only the image's own ENV wins over it, and Apptainer itself leaves out HOME, PATH and
LD_LIBRARY_PATH (its `--env`/APPTAINERENV_ variables still set them). A login shell on a cluster
carries what its modules set: a PYTHONPATH of the host's packages (imported before the image's: a
host `ultralytics.py` replaced the image's Ultralytics), a PYTHONHOME (the image's Python would
look for its standard library there and not start), a CUDA_HOME of the host's toolkit (what
torch.compile and extensions would build against), a VIRTUAL_ENV of the host's. rig drops them,
with one WARNING naming each, before anything of the image runs: `rig exec` (the ENTRYPOINT, so
`apptainer run` of any command) and rig's own commands (`apptainer exec IMAGE rig train`).
RIG_HOST_ENV=keep keeps them as they came.

Docker, compose and Kubernetes hand over only what was asked for, so there nothing is dropped: an
LD_LIBRARY_PATH there is the platform's own (GKE's driver folder) or the user's choice.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass

KEEP_ENV = "RIG_HOST_ENV"  # "keep": the host's variables stay as they came
# What Apptainer sets in every container it starts (and Singularity under its old name).
RUNTIME_MARKERS = ("APPTAINER_CONTAINER", "SINGULARITY_CONTAINER")
# Apptainer's own library folders (--nv's driver libraries) and the system folders its action script
# puts before them: never the host's.
_RUNTIME_LIB_PREFIX = "/.singularity.d/"
_SYSTEM_LIB_DIRS = frozenset(
    {
        "/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib",
        "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/usr/local/lib/x86_64-linux-gnu",
    }
)  # fmt: skip

# Each variable that breaks the image, and what it would do.
BREAKING = {
    "PYTHONPATH": "the host's Python modules would be imported before the image's",
    "PYTHONHOME": "the image's Python would look for its standard library there and not start",
    "LD_LIBRARY_PATH": "the host's libraries would be loaded before the image's (cuDNN, NCCL)",
    "CUDA_HOME": "torch.compile and extensions would build against the host's CUDA toolkit",
    "VIRTUAL_ENV": "the image's Python environment is its own",
}


@dataclass(frozen=True)
class Cleaned:
    env: dict[str, str]  # the environment to use
    dropped: dict[str, str]  # name: the host's value, dropped


def passes_host_env(environ: Mapping[str, str]) -> bool:
    """Whether the runtime handed the container the host's environment (Apptainer, Singularity)."""
    return any(environ.get(name) for name in RUNTIME_MARKERS)


def _runtime_lib_dir(entry: str) -> bool:
    return entry.startswith(_RUNTIME_LIB_PREFIX) or entry.rstrip("/") in _SYSTEM_LIB_DIRS


def cleaned(environ: Mapping[str, str], venv: str = sys.prefix) -> Cleaned:
    """The environment without the host's breaking variables (pure). Only where the runtime passes
    the host's environment in, and not under RIG_HOST_ENV=keep. LD_LIBRARY_PATH keeps Apptainer's own
    folders (--nv); VIRTUAL_ENV is the image's again (venv); the others go."""
    env = dict(environ)
    if not passes_host_env(env) or env.get(KEEP_ENV, "").strip().lower() == "keep":
        return Cleaned(env, {})
    dropped: dict[str, str] = {}
    for name in BREAKING:
        value = env.get(name)
        if value is None:
            continue
        if name == "VIRTUAL_ENV":
            if value.rstrip("/") != venv.rstrip("/"):
                dropped[name] = value
                env[name] = venv
            continue
        if name == "LD_LIBRARY_PATH":
            kept = [e for e in value.split(":") if e and _runtime_lib_dir(e)]
            if len(kept) == len([e for e in value.split(":") if e]):
                continue
            dropped[name] = ":".join(e for e in value.split(":") if e and not _runtime_lib_dir(e))
            if kept:
                env[name] = ":".join(kept)
            else:
                del env[name]
            continue
        dropped[name] = value
        del env[name]
    return Cleaned(env, dropped)


def line(dropped: Mapping[str, str]) -> str:
    """The one WARNING for what was dropped."""
    what = "; ".join(f"{name}={value} ({BREAKING[name]})" for name, value in dropped.items())
    return (
        f"dropped the host's {what}: Apptainer passes the host's environment in; "
        f"`apptainer run --cleanenv` leaves it out, {KEEP_ENV}=keep (`--env {KEEP_ENV}=keep`) keeps it"
    )
