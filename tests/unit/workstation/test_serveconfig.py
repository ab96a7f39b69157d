"""`rig serve`'s input, checked before anything listens: SSH keys, password and token files, services."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from rig.errors import RigError
from rig.workstation import serveconfig, services, sshd, users

from tests.helpers import needs_ssh_keygen

CURRENT = users.Ids(1000, 1000)


# ---- SSH input ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pubkey(tmp_path_factory: pytest.TempPathFactory) -> str:
    if shutil.which("ssh-keygen") is None:
        pytest.skip("needs ssh-keygen")
    key = tmp_path_factory.mktemp("key") / "id"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "me@laptop", "-f", key], check=True)
    return key.with_suffix(".pub").read_text().strip()


def test_parse_keys_skips_blanks_and_comments() -> None:
    keys = sshd.parse_keys("\n# mine\nssh-ed25519 AAAA a\n  \nssh-rsa BBBB b\n", "SSH_PUBLIC_KEY")
    assert [(k.line, k.source) for k in keys] == [
        ("ssh-ed25519 AAAA a", "SSH_PUBLIC_KEY line 3"),
        ("ssh-rsa BBBB b", "SSH_PUBLIC_KEY line 5"),
    ]


@needs_ssh_keygen
def test_valid_keys_pass_and_a_truncated_key_names_its_line(pubkey: str) -> None:
    sshd.validate_keys(sshd.parse_keys(f'{pubkey}\nfrom="10.0.0.0/8" {pubkey}', "SSH_PUBLIC_KEY"))
    truncated = pubkey[:40] + pubkey[41:]
    with pytest.raises(RigError, match=r"SSH_PUBLIC_KEY line 2 is not a valid SSH public key"):
        sshd.validate_keys(sshd.parse_keys(f"{pubkey}\n{truncated}", "SSH_PUBLIC_KEY"))


@needs_ssh_keygen
def test_load_reads_keys_password_and_token_files(tmp_path: Path, pubkey: str) -> None:
    (tmp_path / "authorized_keys").write_text(pubkey + "\n")
    (tmp_path / "pw").write_text("correct horse\n")
    config = serveconfig.load(
        {"SSH_PASSWORD_FILE": str(tmp_path / "pw"), "JUPYTER_TOKEN": "abc123abc123abc1"}, tmp_path
    )
    assert [k.line for k in config.keys] == [pubkey]
    assert config.password == "correct horse"
    assert config.jupyter_token == "abc123abc123abc1"
    empty = serveconfig.load({"SSH_PASSWORD": "", "JUPYTER_TOKEN": ""}, tmp_path / "none")
    assert (empty.keys, empty.password, empty.jupyter_token) == ((), None, None)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"SSH_PASSWORD": "short"}, "SSH_PASSWORD is shorter than 8 characters"),
        ({"SSH_PASSWORD_FILE": "/nonexistent/pw"}, r"SSH_PASSWORD_FILE=/nonexistent/pw: cannot read"),
        (
            {"SSH_PASSWORD": "longenough", "SSH_PASSWORD_FILE": "/x"},
            "both SSH_PASSWORD and SSH_PASSWORD_FILE",
        ),
        ({"JUPYTER_TOKEN_FILE": "/nonexistent/t"}, "JUPYTER_TOKEN_FILE=/nonexistent/t: cannot read"),
        ({"JUPYTER_TOKEN": "two words"}, "JUPYTER_TOKEN contains spaces"),
        ({"JUPYTER_TOKEN": "x" * 15}, "JUPYTER_TOKEN is shorter than 16 characters, short enough to guess"),
        ({"SSH_PUBLIC_KEY": "ssh-ed25519 not-base64"}, "SSH_PUBLIC_KEY line 1 is not a valid SSH public key"),
    ],
)
@needs_ssh_keygen
def test_load_refuses_bad_input(tmp_path: Path, environ: dict[str, str], message: str) -> None:
    with pytest.raises(RigError, match=message):
        serveconfig.load(environ, tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_secret_file(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("longenough")
    secret.chmod(0)
    with pytest.raises(RigError, match="Permission denied"):
        serveconfig.load({"SSH_PASSWORD_FILE": str(secret)}, tmp_path)


def test_services_selection() -> None:
    assert services.enabled({}) == ("sshd", "jupyter", "tensorboard")
    assert services.enabled({"RIG_SERVICES": "jupyter, sshd"}) == ("jupyter", "sshd")
    with pytest.raises(RigError, match="unknown service"):
        services.enabled({"RIG_SERVICES": "sshd,vnc"})


def test_jupyter_token_travels_on_stdin_not_the_environment_argv_or_a_config() -> None:
    environ = {"PATH": "/opt/venv/bin", "SSH_PASSWORD": "hunter22", "JUPYTER_TOKEN": "t" * 20}
    environ |= {"JUPYTER_TOKEN_FILE": "/run/secrets/t", "SSH_PASSWORD_FILE": "/run/secrets/p"}
    spec = services.jupyter_spec(environ, CURRENT, lambda: "s" * 20)
    assert not any("s" * 20 in arg for arg in spec.argv) and "s" * 20 not in repr(spec)
    assert spec.stdin is not None and spec.stdin() == b"s" * 20 + b"\n"
    assert not any("--config" in a for a in spec.argv)
    assert spec.argv[:4] == ("/opt/venv/libexec/jupyter-python", "-I", "-m", "rig.workstation.labserver")
    assert spec.env["JUPYTER_CONFIG_DIR"] == str(services.JUPYTER_CONFIG_DIR)
    assert not set(spec.env) & serveconfig.SECRET_VARIABLES  # kernels and terminals inherit this
    assert spec.env["HOME"] == "/home/yolo"
    assert "--ServerApp.root_dir=/workspace" in spec.argv
    tensorboard = services.tensorboard_spec(environ, CURRENT)
    assert "--host=127.0.0.1" in tensorboard.argv and not set(tensorboard.env) & serveconfig.SECRET_VARIABLES


def test_services_run_nothing_from_the_home_unless_the_user_trusts_it() -> None:
    environ = {"PATH": "/opt/venv/bin:/usr/bin", "PYTHONPATH": "/workspace/src"}
    jupyter = services.jupyter_spec(environ, CURRENT, lambda: "s" * 20)
    # The server: isolated, the image's data folder, a runtime folder of this start, its port held.
    # From an interpreter yolo may execute, not read: never dumpable (rig.workstation.tokengate).
    assert jupyter.argv[:4] == ("/opt/venv/libexec/jupyter-python", "-I", "-m", "rig.workstation.labserver")
    assert jupyter.env["JUPYTER_DATA_DIR"] == "/opt/rig/jupyter-data"
    assert jupyter.env["JUPYTER_RUNTIME_DIR"] == "/run/rig/jupyter"
    assert not any("LanguageServerManager" in a for a in jupyter.argv)  # the image's config: off
    assert jupyter.listen == "0.0.0.0" and jupyter.port == 8888
    # Its kernels and terminals are the user's: they import the user's packages.
    assert jupyter.env["PYTHONPATH"].split(":")[1:] == [
        "/home/yolo/.local/lib/python3.11/site-packages",
        "/workspace/src",
    ]
    tensorboard = services.tensorboard_spec(environ, CURRENT)
    assert tensorboard.argv[3:7] == ("/opt/venv/bin/python", "-I", "-m", "rig.workstation.boardserver")
    assert (
        tensorboard.env["PATH"] == "/opt/venv/bin:/usr/bin"
        and tensorboard.env["PYTHONPATH"] == "/workspace/src"
    )
    assert tensorboard.listen == "127.0.0.1" and tensorboard.env["HOME"] == "/home/yolo"
    trusted = services.jupyter_spec({**environ, "RIG_JUPYTER_TRUST_HOME": "1"}, CURRENT, lambda: "s" * 20)
    assert trusted.argv[:5] == (
        "/opt/venv/libexec/jupyter-python",
        "-I",
        "-m",
        "rig.workstation.labserver",
        "--trust-home",
    )
    assert "JUPYTER_DATA_DIR" not in trusted.env and "--LanguageServerManager.autodetect=True" in trusted.argv
    assert trusted.env["JUPYTER_CONFIG_PATH"] == "/home/yolo/.local/etc/jupyter"
    assert trusted.env["JUPYTER_RUNTIME_DIR"] == "/run/rig/jupyter"  # the runtime folder stays rig's
    assert not services.trusts_home({"RIG_JUPYTER_TRUST_HOME": "0"})
    with pytest.raises(RigError, match="RIG_JUPYTER_TRUST_HOME='maybe': use 1"):
        services.trusts_home({"RIG_JUPYTER_TRUST_HOME": "maybe"})


@pytest.mark.parametrize(
    ("mode", "owner", "readable"),
    [(0o600, (0, 0), False), (0o644, (0, 0), True), (0o640, (0, 4322), True), (0o600, (4321, 0), True)],
)
def test_a_secret_file_readable_by_yolo_is_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: int, owner: tuple[int, int], readable: bool
) -> None:
    ids = users.Ids(4321, 4322)
    st = os.stat_result((mode | 0o100000, 0, 0, 1, owner[0], owner[1], 0, 0, 0, 0))
    assert serveconfig.readable_by(st, ids) is readable
    secret = tmp_path / "pw"
    secret.write_text("longenough-password")
    secret.chmod(0o644)
    serveconfig.load({"SSH_PASSWORD_FILE": str(secret)}, tmp_path, ids=ids)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "SSH_PASSWORD_FILE" in warnings[0] and "chmod 600" in warnings[0]
