"""A corporate proxy and its CA, for every program in the container: pip, `rig weights get`,
`rig datasets get`, training, the users' sessions.

The host's HTTPS_PROXY, HTTP_PROXY and NO_PROXY reach the container through compose (and `make`);
CA_BUNDLE, the build's variable, is mounted at /run/secrets/ca-bundle.pem. `rig exec` (the
entrypoint) joins those CAs to the image's trust store once, at start, into /run/rig/ca-bundle.pem,
and points every TLS client at the result: OpenSSL and Python's ssl (SSL_CERT_FILE), requests
(REQUESTS_CA_BUNDLE), pip (PIP_CERT), curl (CURL_CA_BUNDLE); a value the user set wins. The proxy
variables get their lower-case twins (curl and others read only those), and NO_PROXY always keeps
the container's own loopback off the proxy (JupyterLab's proxy to TensorBoard, the kernels).
`rig serve` hands the result to SSH sessions and JupyterLab (rig.workstation.sessionenv).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

from rig import paths, safefs
from rig.errors import RigError

MOUNTED = Path("/run/secrets/ca-bundle.pem")  # compose: ${CA_BUNDLE:-/dev/null}
SYSTEM = Path("/etc/ssl/certs/ca-certificates.crt")  # the image's trust store (Debian's)
BUNDLE = paths.RUN / "ca-bundle.pem"
CA_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "CURL_CA_BUNDLE")
PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY")
LOOPBACK = ("localhost", "127.0.0.1", "::1")
MAX_BUNDLE_BYTES = 16 << 20


def updated(environ: Mapping[str, str], bundle: Path | None) -> dict[str, str]:
    """The environment with the proxy in both spellings and the CA bundle for every TLS client."""
    env = dict(environ)
    for name in (*PROXY_VARIABLES, "NO_PROXY"):
        for spelling in (name, name.lower()):
            if not env.get(spelling, "").strip():
                env.pop(spelling, None)  # compose passes an unset variable as empty
    proxied = False
    for name in PROXY_VARIABLES:
        value = env.get(name) or env.get(name.lower())
        if value:
            env[name] = env[name.lower()] = value
            proxied = True
    if proxied:
        given = (env.get("NO_PROXY") or env.get("no_proxy") or "").split(",")
        hosts = [h.strip() for h in given if h.strip()]
        hosts += [h for h in LOOPBACK if h not in hosts]
        env["NO_PROXY"] = env["no_proxy"] = ",".join(hosts)
    if bundle is not None:
        for name in CA_VARIABLES:
            if not env.get(name, "").strip():
                env[name] = str(bundle)
    return env


def mounted_cas(mounted: Path = MOUNTED) -> bytes | None:
    """The CAs mounted from CA_BUNDLE; None when nothing is (compose mounts /dev/null then)."""
    try:
        fd = os.open(mounted, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise RigError(
            f"CA_BUNDLE, mounted at {mounted}, cannot be read ({e.strerror}); give a PEM file"
        ) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            return None
        if st.st_size > MAX_BUNDLE_BYTES:
            raise RigError(f"CA_BUNDLE, mounted at {mounted}, is larger than 16 MiB; give the CA's PEM file")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(MAX_BUNDLE_BYTES + 1)
    finally:
        os.close(fd)
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise RigError(
            f"CA_BUNDLE, mounted at {mounted}, holds no PEM certificate (-----BEGIN CERTIFICATE-----); "
            "give the proxy's CA as a PEM file"
        )
    return data


def prepare_bundle(mounted: Path = MOUNTED, system: Path = SYSTEM, out: Path = BUNDLE) -> Path | None:
    """The image's CAs and the mounted ones in one file, written at start; None when none is mounted.
    Started as another user (`docker run --user`), /run/rig is not writable: the mounted file alone."""
    cas = mounted_cas(mounted)
    if cas is None:
        return None
    if os.geteuid() != 0:
        return mounted
    joined = system.read_bytes().rstrip(b"\n") + b"\n" + cas
    safefs.write_file(out, joined, 0o644)
    return out
