"""Proxy and CA pass-through: behind a proxy whose server only its own CA vouches for, pip,
`rig weights get`, a kernel and `make weights` get their files; without the proxy or the CA, not.

The proxy is tests/scripts/connect_proxy.py in a helper container: it tunnels CONNECT to an HTTPS
server on its own loopback (`assets.test`, a certificate from a CA this test makes), so the file is
reachable only through the proxy and trusted only with the CA (compose's CA_BUNDLE).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO, SCRIPTS
from tests.helpers.compose import take_down
from tests.helpers.containers import IMAGE, free_port
from tests.helpers.names import unique
from tests.helpers.waiting import wait_until
from tests.helpers.wheels import make_wheel
from tests.helpers.workstation import KERNEL_CELL, Workstation, down, start, up

pytestmark = pytest.mark.image

ASSETS = "https://assets.test/assets/"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_site(d: Path) -> None:
    """A CA, a server certificate for assets.test, and what the server serves."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
             "-days", "2", "-subj", "/CN=userbox test CA", cwd=d)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=assets.test", cwd=d)  # fmt: skip
    (d / "server.ext").write_text(
        "subjectAltName=DNS:assets.test\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n"
    )
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.pem", "-days", "2", "-extfile", "server.ext", cwd=d)  # fmt: skip
    (d / "srv/assets").mkdir(parents=True)
    with zipfile.ZipFile(d / "srv/assets/tiny.pt", "w") as z:  # what `rig weights get` accepts as a .pt
        z.writestr("tiny/data.pkl", b"\x80\x02}q\x00.")
    with zipfile.ZipFile(d / "srv/assets/coco8.zip", "w") as z:  # what `rig datasets get coco8.yaml` unpacks
        z.writestr("coco8/images/train/README", b"a stand-in\n")
    (d / "srv/simple/rigproxied").mkdir(parents=True)  # a PEP 503 index: http.server's folder listing
    make_wheel(d / "srv/simple/rigproxied", "rigproxied")
    for p in [d, *d.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)  # the helper runs as yolo


@pytest.fixture(scope="module")
def site(image: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="userbox-proxy-") as tmp:
        d = Path(tmp)
        make_site(d)
        (d / "connect_proxy.py").write_bytes((SCRIPTS / "connect_proxy.py").read_bytes())
        (d / "connect_proxy.py").chmod(0o644)
        yield d


def run_proxy(site: Path, name: str, *network: str) -> str:
    subprocess.run(
        ["docker", "run", "-d", "--name", name, *network, "-v", f"{site}:/t:ro", IMAGE,
         "python", "/t/connect_proxy.py", "/t/server.pem", "/t/server.key", "/t/srv"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    wait_until(lambda: "READY" in proxy_log(name), timeout=60)
    return name


def proxy_log(name: str) -> str:
    return subprocess.run(["docker", "logs", name], capture_output=True, text=True, timeout=60).stdout


@pytest.fixture(scope="module")
def ws(site: Path) -> Iterator[tuple[Workstation, str]]:
    ws = start(
        "userbox-proxy",
        site,
        HTTPS_PROXY="http://proxy:3128",
        CA_BUNDLE=str(site / "ca.pem"),
        RIG_ASSETS_URL=ASSETS,
    )
    proxy = f"{ws.project}-proxy"
    try:
        up(ws)
        run_proxy(site, proxy, "--network", f"{ws.project}_default", "--network-alias", "proxy")
        yield ws, proxy
    finally:
        subprocess.run(["docker", "rm", "-f", proxy], capture_output=True, timeout=120, check=False)
        down(ws, 20)


def test_pip_in_a_session_goes_through_the_proxy_trusting_its_ca(ws: tuple[Workstation, str]) -> None:
    box, proxy = ws
    result = box.ssh("pip install --index-url https://assets.test/simple/ rigproxied", timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Successfully installed rigproxied-0.1" in result.stdout
    assert "CONNECT assets.test:443" in proxy_log(proxy)


def test_rig_weights_and_datasets_get_and_a_kernel_go_through_the_proxy(ws: tuple[Workstation, str]) -> None:
    box, _ = ws
    got = box.ssh("rig weights get tiny.pt && ls /weights", timeout=180)
    assert got.returncode == 0, got.stdout + got.stderr
    assert "tiny.pt" in got.stdout.split()
    data = box.ssh("rig datasets get coco8.yaml && ls /datasets/coco8/images/train", timeout=180)
    assert data.returncode == 0, data.stdout + data.stderr
    assert data.stdout.split()[-1] == "README"
    code = f"import requests; assert requests.get('{ASSETS}tiny.pt', timeout=30).status_code == 200"
    args = ("exec", "-T", "workstation", "timeout", "90", "python", "-", code, "end")
    cell = box.compose(*args, input=KERNEL_CELL, check=False, timeout=120)
    assert "REPLY ok" in cell.stdout, cell.stdout + cell.stderr


def test_without_the_proxy_or_its_ca_the_file_is_out_of_reach(ws: tuple[Workstation, str]) -> None:
    """The controls: each half of the pass-through is needed, so the tests above prove it works."""
    box, _ = ws
    fetch = f"python -c \"import requests; requests.get('{ASSETS}tiny.pt', timeout=30)\""
    no_ca = box.ssh(f"REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt {fetch}")
    assert no_ca.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in no_ca.stderr, no_ca.stderr
    no_proxy = box.ssh(f"env -u HTTPS_PROXY -u https_proxy {fetch}")
    assert no_proxy.returncode == 1 and "assets.test" in no_proxy.stderr, no_proxy.stderr


def test_make_weights_goes_through_the_proxy(site: Path) -> None:
    port = free_port()
    project = unique("make-proxy")
    proxy = run_proxy(site, f"{project}-proxy", "-p", f"127.0.0.1:{port}:3128")
    image, tag = IMAGE.rsplit(":", 1)
    try:
        result = subprocess.run(
            ["make", "weights", "W=tiny.pt", f"IMAGE={image}", f"TAG={tag}", "CPU_ONLY=yes",
             "ENV_FILE=/dev/null",
             "NETWORK=host", f"CA_BUNDLE={site / 'ca.pem'}", f"RIG_ASSETS_URL={ASSETS}"],
            cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
            env={**_host_env(), "COMPOSE_PROJECT_NAME": project, "HTTPS_PROXY": f"http://127.0.0.1:{port}"},
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        assert "CONNECT assets.test:443" in proxy_log(proxy)
        listed = subprocess.run(
            ["docker", "run", "--rm", "-v", f"{project}_weights:/w", IMAGE, "ls", "/w"],
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        assert "tiny.pt" in listed.stdout.split()
    finally:
        subprocess.run(["docker", "rm", "-f", proxy], capture_output=True, timeout=120, check=False)
        take_down(project)  # the volumes and the network `make weights` made


def _host_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.upper() not in ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY")}
