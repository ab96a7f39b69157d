"""rig.instrument.metrics.access and the token file (rig.instrument.metrics.config): who may read /metrics."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from rig.errors import RigError
from rig.instrument.metrics import access, config
from rig.instrument.metrics.access import Access

HOST_ONLY = Access(None, frozenset({"172.18.0.1", "fd00::1"}))
TOKEN = "s3cret-token-0123456789"


@pytest.mark.parametrize(
    ("peer", "served"),
    [
        ("127.0.0.1", True),
        ("127.0.0.53", True),
        ("::1", True),
        ("172.18.0.1", True),  # the gateway: Docker's published port, or the host itself
        ("::ffff:172.18.0.1", True),  # the same, on a dual-stack socket
        ("fd00::1", True),
        ("172.18.0.3", False),  # another container on the network
        ("::ffff:172.18.0.3", False),
        ("10.0.0.7", False),
        ("not an address", False),
    ],
)
def test_without_a_token_only_this_host_is_served(peer: str, served: bool) -> None:
    assert access.may_connect(HOST_ONLY, peer) is served
    assert access.status(HOST_ONLY, peer, f"Bearer {TOKEN}") == (200 if served else 403)


@pytest.mark.parametrize(
    ("authorization", "code"),
    [
        (f"Bearer {TOKEN}", 200),
        (f"bearer {TOKEN}", 200),
        ("", 401),
        ("Bearer", 401),
        (f"Bearer {TOKEN}x", 401),
        (f"Basic {TOKEN}", 401),
    ],
)
def test_with_a_token_every_peer_must_send_it(authorization: str, code: int) -> None:
    with_token = Access(TOKEN, HOST_ONLY.gateways)
    for peer in ("127.0.0.1", "172.18.0.3"):
        assert access.may_connect(with_token, peer)
        assert access.status(with_token, peer, authorization) == code


def test_gateways_from_a_fake_proc(tmp_path: Path) -> None:
    net = tmp_path / "net"
    net.mkdir()
    (net / "route").write_text(
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        "eth0\t00000000\t010012AC\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"  # default via 172.18.0.1
        "eth0\t000012AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n"  # the network itself
    )
    (net / "ipv6_route").write_text(
        "00000000000000000000000000000000 00 00000000000000000000000000000000 00 "
        "fd000000000000000000000000000001 00000400 00000001 00000000 00000003 eth0\n"
        "fe800000000000000000000000000000 40 00000000000000000000000000000000 00 "
        "00000000000000000000000000000000 00000100 00000001 00000000 00000001 eth0\n"
    )
    assert access.gateways(tmp_path) == {"172.18.0.1", "fd00::1"}
    assert access.gateways(tmp_path / "none") == frozenset()


def test_the_token_file(tmp_path: Path) -> None:
    env = {config.TOKEN_FILE_ENV: str(tmp_path / "token")}
    assert config.token({}) is None
    with pytest.raises(RigError, match=r"RIG_METRICS_TOKEN_FILE=.*: cannot be read"):
        config.token(env)
    (tmp_path / "token").write_text(f"{TOKEN}\n")
    assert config.token(env) == TOKEN
    (tmp_path / "token").write_text("short\n")
    with pytest.raises(RigError, match="not a usable token; put a token of 16 characters or more"):
        config.token(env)
    (tmp_path / "token").unlink()
    os.mkfifo(tmp_path / "token")  # refused at once, never waited on
    done: list[str] = []

    def read() -> None:
        with pytest.raises(RigError, match="a FIFO, not a regular file"):
            config.token(env)
        done.append("ok")

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(10)
    assert done == ["ok"]
