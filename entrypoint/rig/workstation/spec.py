"""What the supervisor runs: a service as a value (argv, port, environment, user), nothing more."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rig.workstation.users import Ids


@dataclass(frozen=True)
class ServiceSpec:
    name: str
    argv: tuple[str, ...]
    port: int  # it is RUNNING once it listens there (and holds every socket listening there)
    env: Mapping[str, str] = field(default_factory=dict)
    ids: Ids | None = None  # None: stays root (a service that drops privileges itself, like sshd)
    cwd: Path = Path("/")  # root's: nothing a user leaves in a working folder is picked up
    # What the supervisor hands it through a pipe on its stdin, asked for at every start: a secret
    # for it alone, never on disk, that can be new at each start.
    stdin: Callable[[], bytes] | None = field(default=None, repr=False)
    # stdin written only once the process is its own program, not dumpable and untraced
    # (rig.workstation.tokengate): for a service that makes itself non-dumpable first.
    stdin_guarded: bool = False
    # The address the supervisor listens on for it, handing the socket to each start
    # (rig.workstation.handover); None: the service binds its port itself.
    listen: str | None = None
