#!/opt/venv/bin/python -I
"""A stand-in for Apptainer, written from its sources, for the tests (never in the product image).

What Apptainer 1.5 (github.com/apptainer/apptainer at v1.5.3-312-g917d665, August 2026) does when it
runs a Docker image converted to a SIF (`apptainer build yolo-rig.sif docker-daemon://IMAGE`), as its
files say:
- internal/pkg/build/sources/conveyorPacker_oci.go: the SIF's /.singularity.d/runscript is built from
  the image's ENTRYPOINT and CMD (`runscript` below, its template verbatim): `apptainer run IMAGE ARGS`
  runs ENTRYPOINT + ARGS, or ENTRYPOINT + CMD without ARGS, the arguments evaluated by the shell
  (`eval "set ..."`); `apptainer exec IMAGE COMMAND` runs COMMAND without the ENTRYPOINT, and no flag
  skips it under `run`. Its ENV becomes /.singularity.d/env/10-docker2singularity.sh:
  `export NAME="${NAME:-"value"}"` (PATH: `export PATH="value"`).
- internal/pkg/util/env/create.go (SetContainerEnv): the host's environment is passed in, but never
  APPTAINER_*/SINGULARITY_* and never HOME, PATH or LD_LIBRARY_PATH (`alwaysOmitKeys`; only
  LD_LIBRARY_PATH may come from APPTAINERENV_); APPTAINERENV_NAME / SINGULARITYENV_NAME (and `--env`,
  internal/pkg/runtime/launch/launcher_linux.go setEnvVars) set NAME; `--cleanenv` passes only the
  proxy variables and TERM (`alwaysPassKeys`) and sets LANG=C; HOME is the home's destination.
- internal/pkg/util/fs/files/action_script.sh: every passed variable is unset (clear_env), the env
  scripts are sourced (so the image's ENV wins over the host's), the APPTAINERENV_ values exported
  over them (/.inject-apptainer-env.sh, internal/pkg/runtime/engine/apptainer/process_linux.go:
  LD_LIBRARY_PATH gets `:/.singularity.d/libs`), then the host's values come back for the names
  the image did not set, and empty ones are unset (restore_env). 99-base.sh
  (internal/pkg/build/sources/99-base.sh) appends /.singularity.d/libs to LD_LIBRARY_PATH.
- launcher_linux.go: APPTAINER_CONTAINER and APPTAINER_NAME (and SINGULARITY_ copies) name the image;
  the working folder is the caller's.
And its documentation (apptainer/apptainer-userdocs, docker_and_oci.rst: "Read-only by Default",
"Dockerfile USER", "Default Mounts / $HOME", "Environment Propagation", "Namespace & Device
Isolation", "Init Shim Process"): the root file system is read-only; USER is ignored and everything
runs as the calling user; the user's home, /tmp and the working folder are bound in; no PID, IPC or
network namespace (tini is not PID 1, /dev/shm and the network are the host's).

Two ways to use it. On the local Slurm cluster's nodes, which are containers of the image already
(read-only root, the users' homes, /tmp), this file is `apptainer`: it gives the command the
environment Apptainer would and runs the runscript or the command, as the user srun started
(`srun apptainer run --nv yolo-rig.sif rig train ...`; the image's path names nothing here, as
Pyxis' stand-in takes --container-image). The image tests import it (tests/helpers/apptainer.py) for
the same environment and runscript, and start the container with `docker run --read-only --user
UID:GID --pid host --ipc host --network host` and the binds. Left out: `--nv`'s driver libraries
(this box has no GPU: Apptainer's own warning is printed), the evaluation of APPTAINERENV_ values
by the shell, `--contain`/`--compat`, instances, overlays and the OCI mode.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ENV_PREFIXES = ("APPTAINERENV_", "SINGULARITYENV_")  # the order decides which wins
RUNTIME_PREFIXES = ("APPTAINER_", "SINGULARITY_")  # never forwarded
ALWAYS_PASS = frozenset(
    {"TERM", "http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "no_proxy", "NO_PROXY",
     "all_proxy", "ALL_PROXY", "ftp_proxy", "FTP_PROXY"}
)  # fmt: skip
# Omitted from the host's environment; False: APPTAINERENV_ may not set it either.
ALWAYS_OMIT = {
    "HOME": False, "PATH": False, "APPTAINER_SHELL": False, "APPTAINER_APPNAME": False,
    "SINGULARITY_SHELL": False, "SINGULARITY_APPNAME": False, "LD_LIBRARY_PATH": True,
}  # fmt: skip
LIBS = "/.singularity.d/libs"
# The cluster's image: its ENV as the image has it (docker/cluster/Dockerfile writes it), and its
# ENTRYPOINT and CMD (tests/cluster/test_apptainer.py checks them against the image's config).
IMAGE_ENV_FILE = "/usr/local/lib/rig-cluster/image.env"
ENTRYPOINT = ["/usr/bin/tini", "--", "/opt/venv/bin/rig", "exec", "--"]
CMD = ["rig", "serve"]

# conveyorPacker_oci.go's ociRunscript as it renders for an image with both an ENTRYPOINT and a CMD
# (its branches for one of them alone, which test false at run time, left out).
_RUNSCRIPT = """
# When SINGULARITY_NO_EVAL set, use OCI compatible behavior that does
# not evaluate resolved CMD / ENTRYPOINT / ARGS through the shell, and
# does not modify expected quoting behavior of args.
if [ -n "$SINGULARITY_NO_EVAL" ]; then
    # ENTRYPOINT and CMD - run ENTRYPOINT with CMD as default args
    # override with user provided args
    if [ $# -gt 0 ]; then
        {prepend_entrypoint}
    else
        {prepend_cmd}
        {prepend_entrypoint}
    fi
    exec "$@"
fi

# Standard Apptainer behavior evaluates CMD / ENTRYPOINT / ARGS
# combination through shell before exec, and requires special quoting
# due to concatenation of CMDLINE_ARGS.
CMDLINE_ARGS=""
# prepare command line arguments for evaluation
for arg in "$@"; do
        CMDLINE_ARGS="${{CMDLINE_ARGS}} \\"$arg\\""
done

# ENTRYPOINT and CMD - run ENTRYPOINT with CMD as default args
# override with user provided args
if [ $# -gt 0 ]; then
    SINGULARITY_OCI_RUN="${{OCI_ENTRYPOINT}} ${{CMDLINE_ARGS}}"
else
    SINGULARITY_OCI_RUN="${{OCI_ENTRYPOINT}} ${{OCI_CMD}}"
fi

# Evaluate shell expressions first and set arguments accordingly,
# then execute final command as first container process
eval "set ${{SINGULARITY_OCI_RUN}}"
exec "$@"
"""


def _escape(value: str) -> str:  # internal/pkg/util/shell: Escape
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`").replace("$", "\\$")


def _args_quoted(args: Sequence[str]) -> str:  # ArgsQuoted
    return " ".join(f'"{_escape(a)}"' for a in args)


def _single(value: str) -> str:  # EscapeSingleQuotes
    return value.replace("'", "'\"'\"'")


def runscript(entrypoint: Sequence[str], cmd: Sequence[str]) -> str:
    """/.singularity.d/runscript for an image with both an ENTRYPOINT and a CMD (this one has both)."""
    prepend_cmd = "\n".join(f"set -- '{_single(c)}' \"$@\"" for c in reversed(cmd))
    prepend_ep = "\n".join(f"set -- '{_single(e)}' \"$@\"" for e in reversed(entrypoint))
    head = (
        "#!/bin/sh\n"
        f"OCI_ENTRYPOINT='{_single(_args_quoted(entrypoint))}'\n"
        f"OCI_CMD='{_single(_args_quoted(cmd))}'\n"
    )
    return head + _RUNSCRIPT.format(prepend_cmd=prepend_cmd, prepend_entrypoint=prepend_ep)


def _fixpath(path: str) -> str:  # process_linux.go fixPathBuiltin: the default folders it lacks, appended
    parts = path.split(":") if path else []
    return ":".join(parts + [d for d in DEFAULT_PATH.split(":") if d not in parts])


def container_environ(
    host: Mapping[str, str],
    image_env: Mapping[str, str],
    *,
    home: str,
    image: str,
    env: Mapping[str, str] | None = None,
    cleanenv: bool = False,
    binds: Sequence[str] = (),
) -> dict[str, str]:
    """The environment the command starts with: the host's (host), the image's ENV (image_env),
    `--env` (env), as SetContainerEnv and the action script make it."""
    host = dict(host)
    for name, value in (env or {}).items():  # --env: APPTAINERENV_ variables (setEnvVars)
        host[f"APPTAINERENV_{name}"] = value
    overrides: dict[str, str] = {}
    for prefix in ENV_PREFIXES:
        for key, value in host.items():
            name = key[len(prefix) :] if key.startswith(prefix) else ""
            if not name or ALWAYS_OMIT.get(name) is False:
                continue
            if name in ("PREPEND_PATH", "APPEND_PATH", "PATH"):
                name = f"SING_USER_DEFINED_{name}"
            overrides.setdefault(name, value)
    process: dict[str, str] = {}  # what the container's process gets before the action script
    for key, value in host.items():
        if key.startswith(RUNTIME_PREFIXES) or key.startswith(ENV_PREFIXES) or key in overrides:
            continue
        if key in ALWAYS_PASS or not (cleanenv or key in ALWAYS_OMIT):
            process[key] = value
    if cleanenv:
        process["LANG"] = "C"
    process |= {"HOME": home, "PATH": DEFAULT_PATH}
    image_path = os.path.abspath(image)
    for prefix in RUNTIME_PREFIXES:
        process |= {f"{prefix}CONTAINER": image_path, f"{prefix}NAME": os.path.basename(image_path)}
        if binds:
            process[f"{prefix}BIND"] = ",".join(binds)
    # The action script: clear_env keeps only these, then the env scripts and the overrides.
    kept = {"PWD", "HOME", "OPTIND", "UID", "GID", "SINGULARITY_APPNAME", "SINGULARITY_SHELL"}
    kept |= {"APPTAINER_NAME", "APPTAINER_CONTAINER", "APPTAINER_INSTANCE"}
    result = {k: v for k, v in process.items() if k in kept}
    for key, value in image_env.items():  # 10-docker2singularity.sh, then fixpath
        result[key] = value
    result["PATH"] = _fixpath(result.get("PATH", ""))
    ld = result.get("LD_LIBRARY_PATH", "")  # 99-base.sh
    result["LD_LIBRARY_PATH"] = f"{ld}:{LIBS}" if ld else LIBS
    result.setdefault("PS1", "Apptainer> ")
    for key, value in overrides.items():  # /.inject-apptainer-env.sh
        result[key] = f"{value}:{LIBS}" if key == "LD_LIBRARY_PATH" and value else value
    path = result["PATH"]  # 99-runtimevars.sh
    if prepend := result.pop("SING_USER_DEFINED_PREPEND_PATH", ""):
        path = f"{prepend}:{path}"
    if append := result.pop("SING_USER_DEFINED_APPEND_PATH", ""):
        path = f"{path}:{append}"
    result["PATH"] = result.pop("SING_USER_DEFINED_PATH", "") or path
    for key, value in process.items():  # restore_env
        if key not in result:
            result[key] = value
    result = {k: v for k, v in result.items() if v != ""}
    result.setdefault("PS1", "Apptainer> ")
    result["PROMPT_COMMAND"] = f'PS1="{result["PS1"]}"; unset PROMPT_COMMAND'
    for prefix in RUNTIME_PREFIXES:
        result[f"{prefix}ENVIRONMENT"] = "/.singularity.d/env/91-environment.sh"
    return result


def read_image_env(path: str = IMAGE_ENV_FILE) -> dict[str, str]:
    with open(path, "rb") as f:
        entries = [e.decode() for e in f.read().split(b"\0") if e]
    return dict(e.split("=", 1) for e in entries)


USAGE = "usage: apptainer run|exec [--nv] [--cleanenv] [--env K=V] [--bind SRC[:DST]] IMAGE [ARG...]"


def main(argv: Sequence[str]) -> int:
    """The local cluster's `apptainer`: the node is the container (read-only root, the homes and /tmp
    there), the caller is the user; this gives the environment and runs the runscript or command."""
    if not argv or argv[0] not in ("run", "exec"):
        print(f"ERROR apptainer (local cluster): {USAGE}", file=sys.stderr)
        return 2
    action, rest = argv[0], list(argv[1:])
    env: dict[str, str] = {}
    binds: list[str] = []
    nv = cleanenv = False
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        name, _, value = option.partition("=")
        if name in ("--env", "--bind", "-B") and not value:
            value = rest.pop(0) if rest else ""
        if name == "--nv":
            nv = True
        elif name in ("--cleanenv", "-e"):
            cleanenv = True
        elif name == "--env":
            key, _, val = value.partition("=")
            env[key] = val
        elif name in ("--bind", "-B"):
            for bind in value.split(","):
                destination = [*bind.split(":"), bind][1]
                if not os.path.exists(destination):
                    print(
                        f"ERROR apptainer (local cluster): --bind destination {destination} is not on "
                        f"{os.uname().nodename}; add it to docker/cluster/compose.yaml",
                        file=sys.stderr,
                    )
                    return 2
                binds.append(bind)
        else:
            print(f"ERROR apptainer (local cluster): {option} is not emulated; {USAGE}", file=sys.stderr)
            return 2
    if not rest or (action == "exec" and len(rest) < 2):
        print(f"ERROR apptainer (local cluster): {USAGE}", file=sys.stderr)
        return 2
    image, args = rest[0], rest[1:]
    if nv and not os.path.exists("/proc/driver/nvidia"):
        print("WARNING: Could not find any nv files on this host!", file=sys.stderr)  # Apptainer's own
    home = os.environ.get("HOME") or os.path.expanduser("~")
    environ = container_environ(
        os.environ, read_image_env(), home=home, image=image, env=env, cleanenv=cleanenv, binds=binds
    )
    if action == "run":
        script = runscript(ENTRYPOINT, CMD)
        os.execve("/bin/sh", ["/bin/sh", "-c", script, "/.singularity.d/runscript", *args], environ)
    os.execvpe(args[0], args, environ)  # looked up on the container's PATH
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
