"""`rig exec`: who stays root, and which secrets each command may see."""

from __future__ import annotations

import pytest
from rig.commands import exec as execcmd
from rig.workstation import serveconfig


@pytest.mark.parametrize(
    ("command", "environ", "root"),
    [
        (["rig", "serve"], {}, True),
        (["/opt/venv/bin/rig", "serve"], {}, True),
        (["rig", "train"], {}, False),
        (["python", "-c", "1"], {}, False),
        (["python"], {"RIG_USER": "root"}, True),
        (["bash", "-c", "rig serve"], {}, False),
    ],
)
def test_only_serve_or_rig_user_root_stays_root(
    command: list[str], environ: dict[str, str], root: bool
) -> None:
    assert execcmd.stays_root(command, environ) is root


def test_exec_drops_the_secrets_except_for_serve() -> None:
    assert execcmd.is_serve(["rig", "serve"]) and execcmd.is_serve(["/opt/venv/bin/rig", "serve"])
    assert not execcmd.is_serve(["env"]) and not execcmd.is_serve(["rig", "train"])
    environ = {"PATH": "/x", "JUPYTER_TOKEN": "t" * 20, "SSH_PASSWORD_FILE": "/run/secrets/p"}
    assert serveconfig.without_secrets(environ) == {"PATH": "/x"}


def test_a_command_that_stays_root_never_uses_compile_caches_a_user_can_write() -> None:
    from rig.commands.exec import root_compile_caches

    image = {"TORCHINDUCTOR_CACHE_DIR": "/cache/torch/inductor", "TRITON_CACHE_DIR": "/cache/torch/triton"}
    assert root_compile_caches(image) == {
        "TORCHINDUCTOR_CACHE_DIR": "/root/.cache/torch/inductor",
        "TRITON_CACHE_DIR": "/root/.cache/torch/triton",
    }
    mine = {"TORCHINDUCTOR_CACHE_DIR": "/srv/root-only/inductor", "TRITON_CACHE_DIR": "/workspace/t"}
    assert root_compile_caches(mine) == {
        "TORCHINDUCTOR_CACHE_DIR": "/srv/root-only/inductor",
        "TRITON_CACHE_DIR": "/root/.cache/torch/triton",
    }
