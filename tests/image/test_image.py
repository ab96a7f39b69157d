"""The image itself: locked versions, CUDA stack, slim runtime, offline training."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import stat
import subprocess
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from rig.yolo import ultracheck

from tests.helpers import REPO, SCRIPTS
from tests.helpers.containers import Containers
from tests.helpers.lock import locked_runtime, locked_versions, normalize

pytestmark = pytest.mark.image

# What each stack promises, written out here rather than read from the build: the versions a user
# is told (docs/image.md) and the GPU code torch must carry (sm_90 everywhere, Blackwell on cu128).
STACK_FACTS: dict[str, dict[str, Any]] = {
    "cu121": {"torch": "2.3.1", "cuda": "12.1", "cudnn": 8902, "cudnn_dist": "8.9.2.26", "archs": {"sm_90"}},
    "cu128": {
        "torch": "2.9.1",
        "cuda": "12.8",
        "cudnn": 91002,
        "cudnn_dist": "9.10.2.21",
        "archs": {"sm_90", "sm_100", "sm_120"},
    },
}


@pytest.fixture(scope="module")
def stack(docker_client: Any, image: str) -> str:
    """The image's stack, as its label says; the tests below check the label against the contents."""
    name = str(docker_client.images.get(image).labels.get("io.yolo-rig.stack"))
    assert name in STACK_FACTS, f"{image} is labelled stack {name}"
    return name


def run_python(containers: Containers, code: str, **kwargs: Any) -> str:
    rc, out = containers.oneshot(["python", "-c", code], timeout=300, **kwargs)
    assert rc == 0, out
    return out


@pytest.mark.stack
def test_installed_versions_equal_the_lock(containers: Containers, stack: str) -> None:
    scripts = {str(SCRIPTS): {"bind": "/tests", "mode": "ro"}}
    rc, out = containers.oneshot(["python", "/tests/installed.py"], timeout=300, volumes=scripts)
    assert rc == 0, out
    facts = json.loads(out.strip().splitlines()[-1])
    installed = {normalize(k): v for k, v in facts["installed"].items()}
    locked = {normalize(k): v for k, v in locked_runtime(facts["environment"], stack).items()}
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert installed.pop("yolo-rig") == version
    assert installed == locked


@pytest.mark.stack
def test_labels_carry_the_stack_versions(docker_client: Any, image: str, stack: str) -> None:
    labels = docker_client.images.get(image).labels
    locked, facts = locked_versions(stack), STACK_FACTS[stack]
    assert labels["io.yolo-rig.torch"] == locked["TORCH_VERSION"] == facts["torch"]
    assert labels["io.yolo-rig.ultralytics"] == locked["ULTRALYTICS_VERSION"] == ultracheck.pinned()
    assert labels["io.yolo-rig.cudnn"] == locked["CUDNN_VERSION"] == facts["cudnn_dist"]
    assert labels["io.yolo-rig.cuda"] == locked["CUDA_VERSION"] == facts["cuda"]
    assert re.fullmatch(r"[0-9a-f]{7,40}|unknown", labels["org.opencontainers.image.revision"])


@pytest.mark.stack
def test_the_image_asks_the_runtime_for_its_driver(image: str, stack: str) -> None:
    """The NVIDIA runtime refuses a driver older than NVIDIA_REQUIRE_CUDA before anything runs."""
    out = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{json .Config.Env}}", image],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    env = dict(entry.split("=", 1) for entry in json.loads(out))
    cuda = locked_versions(stack)["CUDA_VERSION"]
    assert cuda == STACK_FACTS[stack]["cuda"]
    assert env["NVIDIA_REQUIRE_CUDA"] == f"cuda>={cuda}"


@pytest.mark.stack
def test_the_image_carries_its_healthcheck(docker_client: Any, image: str, containers: Containers) -> None:
    """`docker run`, compose and any engine that reads the image's own healthcheck get `rig health`,
    as nobody, in isolated mode (compose.yaml declares none of its own)."""
    check = docker_client.api.inspect_image(image)["Config"]["Healthcheck"]
    assert check is not None
    assert check["Test"] == [
        "CMD", "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--no-new-privs",
        "/opt/venv/bin/python", "-I", "-m", "rig", "health",
    ]  # fmt: skip
    seconds = {k: check[k] / 1e9 for k in ("Interval", "Timeout", "StartPeriod")}
    assert seconds == {"Interval": 10, "Timeout": 5, "StartPeriod": 60} and check["Retries"] == 3, check
    assert "healthcheck" not in yaml.safe_load((REPO / "compose.yaml").read_text())["services"]["workstation"]
    # A job's container (`docker run IMAGE rig train ...`) serves nothing: healthy, never stopped for it.
    job = containers.run(["sleep", "60"])
    rc, out = containers.exec(job, check["Test"][1:], 30)
    assert (rc, out.strip()) == (0, "healthy: no services here"), out


@pytest.mark.stack
def test_debian_packages_are_listed_and_labelled(
    docker_client: Any, image: str, containers: Containers
) -> None:
    rc, out = containers.oneshot(
        ["bash", "-c", "sha256sum /opt/rig/debian-packages.txt; cat /opt/rig/debian-packages.txt"]
    )
    assert rc == 0, out
    lines = out.strip().splitlines()
    digest, packages = lines[0].split()[0], lines[1:]
    assert any(re.fullmatch(r"openssh-server=\S+ amd64", p) for p in packages), packages
    assert packages == sorted(packages)
    assert docker_client.images.get(image).labels["io.yolo-rig.debian-packages"] == f"sha256:{digest}"


@pytest.mark.stack
def test_cuda_cudnn_and_a_single_headless_opencv(containers: Containers, stack: str) -> None:
    out = run_python(
        containers,
        "import json, torch, cv2; from importlib import metadata; "
        "print(json.dumps({'cuda': torch.version.cuda, 'cudnn': torch.backends.cudnn.version(), "
        "'cv2': cv2.__version__, 'opencv': sorted(d.metadata['Name'] for d in metadata.distributions() "
        "if 'opencv' in d.metadata['Name'].lower() and 'ultralytics' not in d.metadata['Name'].lower())}))",
    )
    facts = json.loads(out.strip().splitlines()[-1])
    assert facts["cuda"] == STACK_FACTS[stack]["cuda"]
    assert facts["cudnn"] == STACK_FACTS[stack]["cudnn"]
    assert facts["opencv"] == ["opencv-python-headless"]
    # cv2 imported above; libGL must not be what made that possible.
    _, libs = containers.oneshot(["bash", "-c", "ldconfig -p | grep -c 'libGL\\.so' || true"])
    assert libs.strip().splitlines()[-1] == "0"


@pytest.mark.stack
def test_rig_version_reports_the_stack(containers: Containers, stack: str) -> None:
    rc, out = containers.oneshot(["rig", "--version"], timeout=60)
    assert rc == 0, out
    locked = locked_versions(stack)
    assert f"(stack {stack}, revision " in out
    assert f"torch {locked['TORCH_VERSION']}" in out
    assert f"ultralytics {locked['ULTRALYTICS_VERSION']}" in out
    assert f"CUDA {locked['CUDA_VERSION']}" in out and f"cuDNN {locked['CUDNN_VERSION']}" in out


HEAVY = ("torch", "ultralytics", "numpy", "cv2")


@pytest.mark.parametrize(
    ("argv", "runs"),
    [(["--version"], None), (["--help"], None), (["health"], "rig.commands.health")],
)
def test_light_commands_load_no_other_command_nor_the_stack(
    containers: Containers, argv: list[str], runs: str | None
) -> None:
    """`rig --version`, `--help` and `health` (the compose healthcheck, every 10 s) load only what
    they run: no other command module, nothing of torch, Ultralytics or numpy (the start-up figures
    are in BENCHMARKS.md, `make bench-cli`)."""
    _, out = containers.oneshot(
        ["python", "-I", "/tests/rig_imports.py", *argv],
        timeout=120,
        volumes={str(SCRIPTS): {"bind": "/tests", "mode": "ro"}},
    )
    result = json.loads(out.strip().splitlines()[-1])
    assert result["code"] == 0, out  # health: no `rig serve` here, nothing to check
    modules = set(result["modules"])
    assert {m for m in modules if m.startswith("rig.commands.")} == ({runs} if runs else set())
    assert not {m for m in modules if m.split(".")[0] in HEAVY}
    assert "rig.workstation.supervisor" not in modules
    assert "importlib.metadata" not in modules  # 50 ms: rig.versions reads the .dist-info names


@pytest.mark.stack
def test_torch_carries_the_stacks_gpu_code(containers: Containers, stack: str) -> None:
    """Read without a GPU (torch.cuda.get_arch_list() is empty then); `rig doctor`'s table must agree."""
    from rig.versions import stack_named

    out = run_python(containers, "import torch; print(torch._C._cuda_getArchFlags())")
    archs = out.strip().splitlines()[-1].split()
    assert STACK_FACTS[stack]["archs"] <= set(archs), archs
    table = stack_named(stack)
    assert table is not None and tuple(archs) == table.archs


@pytest.mark.stack
def test_torch_compile_builds_its_cpu_kernels(containers: Containers) -> None:
    """torch.compile's toolchain in the runtime: inductor writes C++ and builds it with g++ and Python.h."""
    code = (
        "import glob, torch; f = torch.compile(lambda x: (x.sin() * 2 + 1).sum()); x = torch.randn(257); "
        "assert torch.allclose(f(x), (x.sin() * 2 + 1).sum(), atol=1e-4); "
        "print(len(glob.glob('/cache/torch/inductor/**/*.so', recursive=True)))"
    )
    out = run_python(containers, code, network_mode="none")
    assert int(out.strip().splitlines()[-1]) >= 1, out


def test_image_size_is_bounded(docker_client: Any, image: str) -> None:
    # 6.5 GB: 6.0 GB before torch.compile's toolchain (g++ and the binutils it needs, Python's headers:
    # about 260 MB) made compile=True work in the image; measured 6.27 GB with it (BENCHMARKS.md).
    size = docker_client.images.get(image).attrs["Size"]
    assert size <= 6.5e9, f"{image} is {size / 1e9:.2f} GB"


def test_runtime_has_no_build_tools_uv_or_caches(containers: Containers) -> None:
    # g++ (and the cc, as and ld it drives) is torch.compile's toolchain, on purpose; nothing else builds.
    # pip is there only as rig's gate, which installs into the user's ~/.local (docs/user-environment.md).
    script = (
        "for t in clang make cmake uv; do command -v $t && echo FOUND $t; done; "
        "for t in pip pip3; do grep -q rig.workstation.pipgate $(command -v $t) || echo FOUND $t; done; "
        "/opt/venv/bin/python -I -c 'import pip' 2>/dev/null && echo FOUND pip in the venv; "
        "command -v g++ >/dev/null || echo FOUND no g++ for torch.compile; "
        "ls -d /root/.cache /home/*/.cache /opt/uv /var/lib/apt/lists/*.gz 2>/dev/null | sed 's/^/FOUND /'; "
        "find / -xdev \\( -name '*.whl' -o -path '*/.cache/pip*' -o -path '*/.cache/uv*' \\) 2>/dev/null "
        "| sed 's/^/FOUND /'; true"
    )
    rc, out = containers.oneshot(["bash", "-c", script], timeout=120)
    assert rc == 0, out
    assert "FOUND" not in out, out


def test_rdma_core_loads_for_nccl_and_ibv_devinfo_runs(containers: Containers) -> None:
    """rdma-core's user space, as NCCL's IB transport loads it (dlopen of libibverbs.so.1, which loads
    a provider per device), and `ibv_devinfo` answering in a container given no RDMA device."""
    script = (
        "ldconfig -p | grep -E 'lib(ibverbs|rdmacm)\\.so\\.1 ' | sed 's/^/LDCONFIG /'; "
        "ls /usr/lib/*/libibverbs/libmlx5-rdmav*.so | sed 's/^/PROVIDER /'; "
        'python -c \'import ctypes; ctypes.CDLL("libibverbs.so.1"); ctypes.CDLL("librdmacm.so.1"); '
        'print("CTYPES loaded")\'; '
        "timeout 30 ibv_devinfo; echo DEVINFO rc=$?"
    )
    rc, out = containers.oneshot(["bash", "-c", script], timeout=120, network_mode="none")
    assert rc == 0, out
    assert {line.split()[1] for line in out.splitlines() if line.startswith("LDCONFIG")} == {
        "libibverbs.so.1",
        "librdmacm.so.1",
    }, out
    assert "PROVIDER " in out and "CTYPES loaded" in out, out
    # Without the kernel's uverbs (no /sys/class/infiniband_verbs) libibverbs answers ENOSYS; with
    # it and no device, "No IB devices found". Either way one line and exit 255, never a hang.
    answers = ("Failed to get IB devices list: Function not implemented", "No IB devices found")
    assert any(a in out for a in answers), out
    assert "DEVINFO rc=255" in out, out


def test_tini_is_pid_1(containers: Containers) -> None:
    container = containers.run(["sleep", "60"])
    rc, out = containers.exec(container, "tr '\\0' ' ' </proc/1/cmdline", timeout=10)
    assert rc == 0
    assert out.split()[0] == "/usr/bin/tini", out


def _pem_bodies(pem_text: str) -> set[bytes]:
    blocks = re.findall(r"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", pem_text, re.S)
    return {base64.b64decode("".join(b.split())) for b in blocks}


def secret_only_cas(image_bundle: str) -> set[bytes]:
    """DER bodies of the CAs the host bundle (the build secret) adds to the image's own bundle."""
    host_bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    if not host_bundle.exists():
        pytest.skip("no host CA bundle: the build got no CA secret")
    extra = _pem_bodies(host_bundle.read_text()) - _pem_bodies(image_bundle)
    if not extra:
        pytest.skip("the host bundle adds no CA to Debian's: nothing secret to look for")
    return extra


def needles_for(ders: set[bytes]) -> list[bytes]:
    """Each CA as DER and as the first line of its PEM base64."""
    return [*ders, *(base64.b64encode(der)[:64] for der in ders)]


def layer_folders(docker_client: Any, image: str) -> list[Path] | None:
    """The image's layers as the engine keeps them (overlay2's diff folders, top first), where this
    process can read them (root on the engine's host); else None."""
    driver = docker_client.api.inspect_image(image)["GraphDriver"]
    if driver["Name"] != "overlay2":
        return None
    data = driver["Data"]
    folders = [Path(d) for d in [data.get("UpperDir", ""), *data.get("LowerDir", "").split(":")] if d]
    if not folders or not all(os.access(f, os.R_OK | os.X_OK) for f in folders):
        return None
    return folders


def find_in_image(docker_client: Any, image: str, needles: list[bytes]) -> list[str]:
    """Every file, in every layer and in the image's configuration, that contains one of the needles:
    read from the engine's layer folders where they can be (a `docker save` of 6 GB spends minutes
    writing the layers to a temporary folder first), else from `docker save`."""
    folders = layer_folders(docker_client, image)
    if folders is None:
        return find_in_saved_image(docker_client, image, needles)
    found: list[str] = []
    config = json.dumps(docker_client.api.inspect_image(image)).encode()
    if any(n in config for n in needles):
        found.append("config")
    for folder in folders:
        for parent, _, files in os.walk(folder):
            for name in files:
                path = Path(parent, name)
                info = path.lstat()
                if stat.S_ISREG(info.st_mode) and info.st_size < 64 << 20:
                    data = path.read_bytes()
                    if any(n in data for n in needles):
                        found.append(f"{folder.parent.name}:{path.relative_to(folder)}")
    return found


def find_in_saved_image(docker_client: Any, image: str, needles: list[bytes]) -> list[str]:
    """Every file, in every layer and blob of `docker save`, that contains one of the needles."""
    found: list[str] = []
    chunks = docker_client.images.get(image).save(chunk_size=1 << 20)
    with tarfile.open(fileobj=io.BufferedReader(_Reader(chunks), 1 << 20), mode="r|") as outer:
        for member in outer:
            if not member.isfile():
                continue
            stream = outer.extractfile(member)
            assert stream is not None
            if member.name.endswith("layer.tar") or member.name.startswith("blobs/"):
                try:
                    with tarfile.open(fileobj=stream, mode="r|") as layer:
                        for entry in layer:
                            if entry.isfile() and entry.size < 64 << 20:
                                data = layer.extractfile(entry).read()  # type: ignore[union-attr]
                                if any(n in data for n in needles):
                                    found.append(f"{member.name}:{entry.name}")
                    continue
                except tarfile.ReadError:
                    pass  # a config or manifest blob, not a layer: fall through to a plain read
                stream = outer.extractfile(member)
            if stream is not None and any(n in stream.read() for n in needles):
                found.append(member.name)
    return found


def test_build_ca_bundle_is_in_no_layer(docker_client: Any, image: str, containers: Containers) -> None:
    """The proxy CA handed to the build as a secret must not be stored anywhere in the image."""
    rc, image_bundle = containers.oneshot(["cat", "/etc/ssl/certs/ca-certificates.crt"], timeout=60)
    assert rc == 0
    needles = needles_for(secret_only_cas(image_bundle))
    history = json.dumps(docker_client.api.history(image)).encode()
    assert not any(n in history for n in needles)
    found = find_in_image(docker_client, image, needles)
    assert not found, f"proxy CA found in the image: {found}"


def test_the_layer_scan_finds_a_planted_ca(docker_client: Any, image: str, tmp_path: Path) -> None:
    """The scan above can fail: a CA copied into a layer of a small image is found."""
    host_bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    if not host_bundle.exists():
        pytest.skip("no host CA bundle")
    (tmp_path / "ca.pem").write_bytes(host_bundle.read_bytes())
    (tmp_path / "Dockerfile").write_text(
        "ARG BASE_IMAGE=debian:bookworm-slim\nFROM ${BASE_IMAGE}\nCOPY ca.pem /usr/share/planted.pem\n"
    )
    tag = "rig-test-planted-ca:latest"
    docker_client.images.build(path=str(tmp_path), tag=tag, rm=True, pull=False)
    try:
        needles = needles_for({sorted(_pem_bodies(host_bundle.read_text()))[0]})
        # Both ways to read the layers: the engine's folders (the scan above, where they can be
        # read: root on the engine's host) and `docker save`.
        for scan in (find_in_image, find_in_saved_image):
            found = scan(docker_client, tag, needles)
            assert any(f.endswith("usr/share/planted.pem") for f in found), (scan.__name__, found)
    finally:
        docker_client.images.remove(tag, force=True)


class _Reader(io.RawIOBase):
    """The Docker SDK's chunk iterator as a raw stream, for streaming tarfile through a buffer (a
    slice of one growing bytes object per read copied the rest of it each time: minutes for 6 GB)."""

    def __init__(self, chunks: Any) -> None:
        self._chunks = iter(chunks)
        self._chunk = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._chunk:
            try:
                self._chunk = memoryview(next(self._chunks))
            except StopIteration:
                return 0
        n = min(len(buffer), len(self._chunk))
        buffer[:n] = self._chunk[:n]
        self._chunk = self._chunk[n:]
        return n


@pytest.mark.slow
@pytest.mark.stack
def test_offline_train_val_predict_export(containers: Containers) -> None:
    rc, out = containers.oneshot(
        ["python", "/tests/offline_roundtrip.py", "/tmp/work"],
        timeout=900,
        network_mode="none",
        volumes={str(SCRIPTS): {"bind": "/tests", "mode": "ro"}},
        shm_size="1g",
    )
    assert rc == 0, out[-4000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert result["best_exists"] and result["onnx_exists"], result
    assert result["predicted_images"] == 1
    assert result["network_attempts"] == [], result["network_attempts"]
    for marker in (
        "Download",
        "github.com/ultralytics",
        "ConnectionError",
        "are offline",
        "urlopen",
        "Retry",
    ):
        assert marker not in out, f"{marker!r} in output:\n{out[-4000:]}"


@pytest.mark.slow
@pytest.mark.stack
def test_a_stale_lock_fails_the_build_and_make_lock_fixes_both_stacks(tmp_path: Path, stack: str) -> None:
    """A pyproject.toml edited without `make lock` stops the build of this image's stack; nothing is
    re-resolved. `make lock` (uv lock) then makes the lock current for every stack at once."""
    tmp_path = tmp_path / "context"
    shutil.copytree(REPO, tmp_path, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", ".*_cache"))
    pyproject = tmp_path / "pyproject.toml"
    text = pyproject.read_text()
    pyproject.write_text(text.replace('    "pyyaml",\n', '    "pyyaml",\n    "tqdm>=4.0",\n', 1))
    assert pyproject.read_text() != text
    ca = Path("/etc/ssl/certs/ca-certificates.crt")
    secret = ["--secret", f"id=ca,src={ca}"] if ca.exists() else []
    result = subprocess.run(
        ["docker", "build", *secret, "--build-arg", f"STACK={stack}", "--target", "builder",
         "-t", "rig-test-stale-lock", str(tmp_path)],
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode != 0, out[-3000:]
    # A line the build step printed (BuildKit prefixes them with "#step seconds"), not the echoed RUN.
    printed = r"^#\d+ [\d.]+ ERROR build: uv\.lock is stale for pyproject\.toml \(run 'make lock'\)"
    assert re.search(printed, out, re.M), out[-3000:]

    if shutil.which("uv") is None:
        pytest.skip("no uv on the host: `make lock` cannot run here")
    fixed = subprocess.run(["make", "-C", str(tmp_path), "lock"], capture_output=True, text=True, timeout=300)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    for name in STACK_FACTS:  # what the build's failing step runs, for each stack
        export = subprocess.run(
            ["uv", "export", "--offline", "--quiet", "--locked", "--no-dev", "--no-emit-project",
             "--extra", name, "--format", "requirements-txt", "--project", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
        )  # fmt: skip
        assert export.returncode == 0, export.stderr
        assert f"torch=={STACK_FACTS[name]['torch']} " in export.stdout
