"""The image as Apptainer runs it, for the image tests: the stand-in's environment and runscript
(docker/cluster/apptainer.py, written from Apptainer 1.5's sources: read its header), the rest as
`docker run` does it:
- any uid (`--user UID:GID`, the image's USER and RIG_UID ignored), with the user in /etc/passwd and
  /etc/group as Apptainer adds them;
- the root file system read-only (`--read-only`): nothing of the SIF can be written;
- the caller's home, /tmp and working folder bound (here: folders of the test standing in for the
  host's), the working folder the command's;
- no PID, IPC or network namespace (`--pid host --ipc host --network host`): tini is not PID 1,
  /dev/shm and the ports are the host's;
- the host's environment passed in as Apptainer passes it (the test gives the host's, not pytest's).
What differs: Docker gives the container its own /dev (Apptainer binds the host's), /etc/hosts and
resolv.conf, and HOSTNAME; no GPU here, so `--nv` is Apptainer's warning only.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from tests.helpers import REPO
from tests.helpers.names import unique

STANDIN = REPO / "docker" / "cluster" / "apptainer.py"


def standin() -> ModuleType:
    """docker/cluster/apptainer.py as a module (it is the local cluster's `apptainer` command)."""
    spec = importlib.util.spec_from_file_location("apptainer_standin", STANDIN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Host:
    """The host's side: the caller's ids, home, /tmp and environment. The home is a folder of the
    test's, seen at HOME (/home/hpcuser, as on a login node) on both sides, as Apptainer binds it;
    the command starts in its project folder."""

    uid: int
    gid: int
    home: Path  # the test's folder standing for the home
    tmp: Path  # the test's folder standing for the host's /tmp
    environ: dict[str, str] = field(default_factory=dict)
    user: str = "hpcuser"
    home_path: str = "/home/hpcuser"  # where the home is, on the host as in the container

    @property
    def cwd(self) -> Path:
        """The project folder, as the test sees it."""
        return self.home / "project"

    @property
    def cwd_path(self) -> str:
        """The same folder, as the host and the container see it."""
        return f"{self.home_path}/project"

    @classmethod
    def make(cls, root: Path, uid: int = 4321, gid: int = 4321, **environ: str) -> Host:
        """Folders under root as a login node has them: a home with a project folder, the user's; a
        /tmp open to all (sticky); the environment a login shell there has, plus environ."""
        host = cls(uid, gid, root / "home", root / "tmp")
        for folder, mode in ((host.home, 0o755), (host.cwd, 0o755), (host.tmp, 0o1777)):
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(mode)
        for folder in (host.home, host.cwd):
            os.chown(folder, uid, gid)
        host.environ = {
            "HOME": host.home_path, "USER": host.user, "LOGNAME": host.user, "SHELL": "/bin/bash",
            "PATH": "/opt/site/bin:/usr/local/bin:/usr/bin:/bin", "LANG": "en_US.UTF-8", "TERM": "xterm",
            "MODULEPATH": "/opt/site/modules", "PWD": host.cwd_path, **environ,
        }  # fmt: skip
        return host


class Apptainer:
    """`apptainer run` and `apptainer exec` of the image, for a Host; containers always removed."""

    def __init__(self, client: Any, image: str, host: Host) -> None:
        self.image, self.host = image, host
        config = client.images.get(image).attrs["Config"]
        self.image_env = dict(e.split("=", 1) for e in config["Env"])
        self.entrypoint, self.cmd = list(config["Entrypoint"] or []), list(config["Cmd"] or [])
        self.module = standin()
        self.names: list[str] = []
        self.files = host.tmp.parent / f"apptainer-{uuid.uuid4().hex[:8]}"
        self.files.mkdir()
        self._etc(client)

    def _etc(self, client: Any) -> None:
        """/etc/passwd and /etc/group with the user added, as Apptainer's files/passwd.go does."""
        h = self.host
        for name, line in (
            ("passwd", f"{h.user}:x:{h.uid}:{h.gid}:{h.user}:{h.home_path}:/bin/bash"),
            ("group", f"{h.user}:x:{h.gid}:"),
        ):
            text = client.containers.run(
                self.image, ["/etc/" + name], entrypoint="cat", remove=True, network_mode="none"
            ).decode()
            (self.files / name).write_text(text + line + "\n")
        (self.files / "runscript").write_text(self.module.runscript(self.entrypoint, self.cmd))
        (self.files / "runscript").chmod(0o755)

    def environ(self, env: Mapping[str, str] | None = None, cleanenv: bool = False) -> dict[str, str]:
        result: dict[str, str] = self.module.container_environ(
            self.host.environ, self.image_env, home=self.host.home_path, image="/images/yolo-rig.sif",
            env=env, cleanenv=cleanenv,
        )  # fmt: skip
        return result

    def argv(
        self,
        action: str,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        binds: Sequence[str] = (),
        cleanenv: bool = False,
        name: str,
    ) -> list[str]:
        h = self.host
        docker = ["docker", "run", "--rm", "--name", name, "--read-only", "--user", f"{h.uid}:{h.gid}"]
        docker += ["--pid", "host", "--ipc", "host", "--network", "host", "--workdir", h.cwd_path]
        docker += ["--security-opt", "seccomp=unconfined"]  # Apptainer filters no system call
        # The home, /tmp and the working folder (inside the home here, so its bind is the home's).
        for source, target in ((h.home, h.home_path), (h.tmp, "/tmp")):
            docker += ["--volume", f"{source}:{target}"]
        for bind in binds:
            docker += ["--volume", bind]
        for etc in ("passwd", "group"):
            docker += ["--volume", f"{self.files / etc}:/etc/{etc}:ro"]
        docker += ["--volume", f"{self.files / 'runscript'}:/.singularity.d/runscript:ro"]
        for key, value in self.environ(env, cleanenv).items():
            docker += ["--env", f"{key}={value}"]
        if action == "run":
            return [*docker, "--entrypoint", "/bin/sh", self.image, "/.singularity.d/runscript", *args]
        return [*docker, "--entrypoint", args[0], self.image, *args[1:]]

    def _call(self, action: str, args: Sequence[str], timeout: int, **kwargs: Any) -> tuple[int, str]:
        name = unique("apptainer")
        self.names.append(name)
        try:
            proc = subprocess.run(
                self.argv(action, args, name=name, **kwargs),
                capture_output=True, text=True, timeout=timeout, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired as e:
            out = (
                (e.stdout or b"").decode(errors="replace")
                if isinstance(e.stdout, bytes)
                else (e.stdout or "")
            )
            raise AssertionError(f"{action} {list(args)} ran over {timeout} s:\n{out[-4000:]}") from None
        return proc.returncode, proc.stdout + proc.stderr

    def run(self, args: Sequence[str] = (), timeout: int = 600, **kwargs: Any) -> tuple[int, str]:
        """`apptainer run yolo-rig.sif ARGS`: the runscript (ENTRYPOINT + ARGS, or + CMD)."""
        return self._call("run", args, timeout, **kwargs)

    def exec(self, args: Sequence[str], timeout: int = 600, **kwargs: Any) -> tuple[int, str]:
        """`apptainer exec yolo-rig.sif COMMAND`: the command, without the ENTRYPOINT."""
        return self._call("exec", args, timeout, **kwargs)

    @contextlib.contextmanager
    def started(self, action: str, args: Sequence[str], **kwargs: Any) -> Iterator[subprocess.Popen[str]]:
        """A long-running command (a server), stopped and removed at the end."""
        name = unique("apptainer")
        self.names.append(name)
        proc = subprocess.Popen(
            self.argv(action, args, name=name, **kwargs),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            yield proc
        finally:
            subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60, check=False)
            proc.kill()
            proc.wait(timeout=30)

    def cleanup(self) -> None:
        for name in self.names:
            subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60, check=False)
