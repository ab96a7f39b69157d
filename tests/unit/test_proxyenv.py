"""A proxy and its CA for every program in the container: the variables, and the joined bundle."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rig import proxyenv
from rig.errors import RigError

PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_nothing_given_changes_nothing_but_compose_empties() -> None:
    env = proxyenv.updated({"PATH": "/bin", "HTTPS_PROXY": "", "NO_PROXY": ""}, None)
    assert env == {"PATH": "/bin"}


def test_the_proxy_gets_both_spellings_and_loopback_stays_direct() -> None:
    env = proxyenv.updated({"HTTPS_PROXY": "http://proxy:3128", "no_proxy": "intranet.example"}, None)
    assert env["HTTPS_PROXY"] == env["https_proxy"] == "http://proxy:3128"
    assert "HTTP_PROXY" not in env
    assert env["NO_PROXY"] == env["no_proxy"] == "intranet.example,localhost,127.0.0.1,::1"


def test_the_bundle_reaches_every_tls_client_unless_the_user_chose_one() -> None:
    env = proxyenv.updated({"PIP_CERT": "/mine.pem"}, Path("/run/rig/ca-bundle.pem"))
    assert env == {
        "PIP_CERT": "/mine.pem",
        "SSL_CERT_FILE": "/run/rig/ca-bundle.pem",
        "REQUESTS_CA_BUNDLE": "/run/rig/ca-bundle.pem",
        "CURL_CA_BUNDLE": "/run/rig/ca-bundle.pem",
    }


def test_no_mount_or_dev_null_is_no_bundle(tmp_path: Path) -> None:
    assert proxyenv.mounted_cas(tmp_path / "absent.pem") is None
    assert proxyenv.mounted_cas(Path("/dev/null")) is None  # compose's stand-in for "no CA_BUNDLE"


def test_a_file_without_a_certificate_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate\n")
    with pytest.raises(RigError, match=r"holds no PEM certificate"):
        proxyenv.mounted_cas(bad)


def test_the_bundle_joins_the_images_cas_and_the_mounted_ones(tmp_path: Path) -> None:
    mounted, system, out = tmp_path / "ca.pem", tmp_path / "system.crt", tmp_path / "run/ca-bundle.pem"
    mounted.write_bytes(PEM)
    system.write_bytes(b"SYSTEM CAS\n\n")
    made = proxyenv.prepare_bundle(mounted, system, out)
    if os.geteuid() == 0:
        assert made == out and out.read_bytes() == b"SYSTEM CAS\n" + PEM
    else:
        assert made == mounted
