# yolo-rig: a training box for Ultralytics YOLO on NVIDIA GPUs.
# CUDA and cuDNN come from PyPI's torch wheels (nvidia-* packages), so the base is plain Debian and
# the NVIDIA container toolkit only injects the driver. Two stacks, one per image (STACK below):
# cu121 (torch 2.3.1, CUDA 12.1, cuDNN 8.9; the default) and cu128 (torch 2.9.1, CUDA 12.8,
# cuDNN 9; Blackwell). Every Python package is installed from uv.lock, by hash; build with
# `make build [STACK=cu128]`.

ARG BASE_IMAGE=debian:bookworm-slim
# The base's Python, said once: Debian bookworm's python3 is python3.11. Builder and runtime share it,
# so the venv's interpreter and its site-packages path hold; each stage that names a path derives it.
ARG PYTHON_VERSION=3.11
# The CUDA stack (pyproject.toml's extra), global for the last FROM: it picks the image's final stage.
ARG STACK=cu121

# ---------------------------------------------------------------------------------------------
FROM ${BASE_IMAGE} AS base

# DL4006: fail a RUN on the first broken command of a pipe.
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# An apt mirror, e.g. http://mirror.example/debian; empty keeps the base image's sources.
ARG APT_MIRROR=""
COPY docker/apt-install.sh /usr/local/lib/rig/apt-install.sh
# python3 is the base's Python (PYTHON_VERSION), shared by builder and runtime.
RUN --mount=type=secret,id=ca \
    /usr/local/lib/rig/apt-install.sh --mirror "${APT_MIRROR}" python3 ca-certificates

# ---------------------------------------------------------------------------------------------
FROM base AS builder

# python3-venv: its bundled pip bootstraps the hash-pinned uv below, nothing else.
# binutils: strip-debug.sh.
RUN --mount=type=secret,id=ca \
    /usr/local/lib/rig/apt-install.sh python3-venv binutils

ARG PIP_INDEX_URL=https://pypi.org/simple
ENV PIP_INDEX_URL=${PIP_INDEX_URL} \
    UV_DEFAULT_INDEX=${PIP_INDEX_URL} \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=0 \
    UV_NO_MANAGED_PYTHON=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Reproducible bytecode: with SOURCE_DATE_EPOCH set, py_compile (what UV_COMPILE_BYTECODE runs)
# writes hash-checked .pyc instead of ones stamped with each file's unpack time, so two builds of one
# commit give a byte-identical /opt/venv (tools/compare_builds.sh). No installed file records the
# value; a constant (1980-01-01, the oldest a wheel's zip can hold) keeps the layers below cached
# from one commit to the next.
ENV SOURCE_DATE_EPOCH=315532800

COPY docker/uv-requirements.txt /tmp/uv-requirements.txt
RUN --mount=type=secret,id=ca \
    --mount=type=cache,target=/root/.cache/pip \
    [ -f /run/secrets/ca ] && export PIP_CERT=/run/secrets/ca; \
    python3 -m venv /opt/uv \
    && /opt/uv/bin/pip install --quiet --no-deps --require-hashes -r /tmp/uv-requirements.txt \
    && ln -s /opt/uv/bin/uv /usr/local/bin/uv

# Locked dependencies first, without the project, so editing entrypoint/ reuses this layer.
# `uv export --locked --offline` fails on a lock that no longer matches pyproject.toml: nothing
# re-resolves. The exported list pins every file by hash, so a mirror (PIP_INDEX_URL) serves
# exactly the locked files.
# gpustat and python-hostlist are sdists built without isolation from the locked setuptools(-scm),
# hence two steps.
# STACK: the CUDA stack, one of pyproject.toml's extras; the lock holds both, an image installs one.
ARG STACK=cu121
# RIG_FEATURES: Ultralytics features left out by default, as pyproject.toml's dependency groups
# (e.g. "openvino streamlit"); locked like the rest. Empty: none.
ARG RIG_FEATURES=""
ARG PYTHON_VERSION
WORKDIR /src
# ${groups} is split into its --group flags on purpose.
# hadolint ignore=SC2086
RUN --mount=type=secret,id=ca \
    --mount=type=cache,target=/root/.cache/uv \
    --mount=type=bind,source=uv.lock,target=/src/uv.lock \
    --mount=type=bind,source=pyproject.toml,target=/src/pyproject.toml \
    [ -f /run/secrets/ca ] && export SSL_CERT_FILE=/run/secrets/ca; \
    groups=""; for g in ${RIG_FEATURES}; do groups="${groups} --group ${g}"; done; \
    { uv export --offline --quiet --locked --no-dev --no-emit-project --no-header --format requirements-txt \
         --extra "${STACK}" ${groups} --no-emit-package gpustat --no-emit-package python-hostlist \
         -o /tmp/req-base.txt \
      && uv export --offline --quiet --locked --no-dev --no-emit-project --no-header \
         --format requirements-txt --extra "${STACK}" ${groups} -o /tmp/requirements.txt \
      || { echo "ERROR build: uv.lock is stale for pyproject.toml (run 'make lock'), or RIG_FEATURES='${RIG_FEATURES}' names a group pyproject.toml lacks"; exit 1; }; } \
    && uv venv --quiet --python "/usr/bin/python${PYTHON_VERSION}" /opt/venv \
    && uv pip install --python /opt/venv/bin/python --quiet --require-hashes --no-deps -r /tmp/req-base.txt \
    && uv pip sync --python /opt/venv/bin/python --quiet --require-hashes --no-build-isolation \
         /tmp/requirements.txt \
    && cp /tmp/requirements.txt /opt/venv/requirements.lock.txt

COPY docker/strip-debug.sh /usr/local/lib/rig/strip-debug.sh
# uv leaves a world-writable .lock in the venv; nothing in /opt/venv may be writable by a user.
RUN /usr/local/lib/rig/strip-debug.sh /opt/venv \
    && rm -f /opt/venv/.lock

# ---------------------------------------------------------------------------------------------
# Our Ultralytics defaults and settings. A stage of its own: the runtime takes only the files it
# writes, so editing configs/ never re-copies the dependency layer.
FROM builder AS tuned

# Our Ultralytics defaults (configs/), merged into its packaged default.yaml so the CLI, the
# Python API and notebooks all get them; a key Ultralytics lacks fails the build here.
COPY configs /opt/rig/configs
COPY docker/merge-ultralytics-cfg.py docker/ultralytics-settings.py /usr/local/lib/rig/
ARG PYTHON_VERSION
RUN /opt/venv/bin/python /usr/local/lib/rig/merge-ultralytics-cfg.py /opt/rig/configs/ultralytics.yaml \
        "/opt/venv/lib/python${PYTHON_VERSION}/site-packages/ultralytics/cfg/default.yaml" /opt/rig/configs/upstream.yaml
# Offline settings and fonts, written by the pinned Ultralytics itself: the defaults `rig exec`
# seeds each user's settings from, and root's own (RIG_USER=root). The directory is sticky and
# world-writable like /tmp because Ultralytics' own DDP launcher writes there when a user whose
# settings folder is not writable (`docker run --user`) falls back to it; the baked files stay root's.
RUN YOLO_CONFIG_DIR=/opt/rig/ultralytics YOLO_OFFLINE=true /opt/venv/bin/python \
        /usr/local/lib/rig/ultralytics-settings.py /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf \
    && chmod 1777 /opt/rig/ultralytics/Ultralytics

# Pretrained weights baked into the image only when asked, e.g. RIG_WEIGHTS="yolo11n.pt yolo26n.pt"
# (yolo26n.pt is what Ultralytics' AMP check on a GPU loads). Default: none, nothing downloaded.
ARG RIG_WEIGHTS=""
RUN --mount=type=secret,id=ca \
    mkdir -p /opt/rig/weights \
    && if [ -n "${RIG_WEIGHTS}" ]; then \
         if [ -f /run/secrets/ca ]; then export SSL_CERT_FILE=/run/secrets/ca REQUESTS_CA_BUNDLE=/run/secrets/ca; fi; \
         YOLO_CONFIG_DIR=/tmp/yolo-config /opt/venv/bin/python -c \
           'import os, sys; os.chdir("/opt/rig/weights"); from ultralytics.utils.downloads import attempt_download_asset as get; [get(w) for w in sys.argv[1:]]' \
           ${RIG_WEIGHTS} \
         && rm -rf /tmp/yolo-config; \
       fi

# ---------------------------------------------------------------------------------------------
# The project itself (the `rig` command), built by uv's own backend, offline, into a separate
# prefix: the runtime stage overlays it on the venv in a small layer of its own, so a code edit
# never re-copies the multi-GB dependency layer.
# uv_cache.json is uv's note of when it installed the package (for its own reinstall checks, no use
# in an image without uv): the one file that differed between two builds of a commit, with its
# RECORD line. uv keys its cached build of a local project by pyproject.toml's mtime alone, so a
# code edit would install the previous build's wheel: its cache entries go first (`--refresh`
# would do it, but not `--offline`).
# `rig` runs Python isolated (`#!/opt/venv/bin/python -I`, docker/isolate-script.py): as root (the
# entrypoint, `docker exec ... rig`) it imports nothing from PYTHONPATH or a user's site.
FROM builder AS project
COPY pyproject.toml uv.lock README.md /src/
COPY entrypoint /src/entrypoint
COPY docker/isolate-script.py /usr/local/lib/rig/isolate-script.py
ARG PYTHON_VERSION
RUN --mount=type=cache,target=/root/.cache/uv \
    uv cache clean --quiet yolo-rig \
    && uv pip install --python /opt/venv/bin/python --prefix /opt/rig-project --quiet --no-deps --offline /src \
    && rm -f /opt/rig-project/.lock \
    && dist=$(echo "/opt/rig-project/lib/python${PYTHON_VERSION}/site-packages/"yolo_rig-*.dist-info) \
    && rm "${dist}/uv_cache.json" \
    && sed -i '/\/uv_cache\.json,/d' "${dist}/RECORD" \
    && python3 /usr/local/lib/rig/isolate-script.py /opt/rig-project/bin/rig "${dist}/RECORD"

# ---------------------------------------------------------------------------------------------
# Python's C headers, alone. torch.compile builds small extensions at run time that include
# Python.h (inductor's CPU kernels, Triton's GPU launcher); the runtime takes these two folders,
# not the static library and the rest of the -dev package, and the builder's layers stay as they are.
FROM base AS pyheaders
ARG PYTHON_VERSION
RUN --mount=type=secret,id=ca \
    /usr/local/lib/rig/apt-install.sh "libpython${PYTHON_VERSION}-dev"

# ---------------------------------------------------------------------------------------------
# The runtime's Debian packages, a stage of their own: the runtime starts from it, and the SBOM
# stage reads its package list without waiting for the rest of the runtime.
FROM base AS os

# tini: PID 1 that reaps and forwards signals. openssh-server: the workstation's SSH.
# fonts-dejavu-core: Ultralytics' plots get a local font instead of downloading Arial.
# numactl: `numactl --hardware` for users checking the topology the entrypoint binds to.
# procps, less: what people expect in an SSH session.
# tmux, screen: long runs over SSH survive a dropped connection (docs/training.md: "Long runs over SSH").
# g++: torch.compile's toolchain, the one compiler both need: inductor compiles its CPU kernels as
# C++ and Triton builds its GPU launcher with the C compiler g++ depends on (its size, the price of
# `compile=True`, is in BENCHMARKS.md; nothing else in the image compiles).
RUN --mount=type=secret,id=ca \
    /usr/local/lib/rig/apt-install.sh tini openssh-server fonts-dejavu-core numactl procps less \
        tmux screen g++ \
    && rm -f /etc/ssh/ssh_host_*
# rdma-core's user space: NCCL's InfiniBand/RoCE transport dlopens libibverbs and, without it, falls
# back to TCP sockets between nodes even where the host passes /dev/infiniband (docs/training.md:
# "The fabric"). ibverbs-providers: the drivers libibverbs loads per device (mlx5, efa, ...);
# librdmacm1: rdma-core's connection manager, for the tools and network plugins that link it; ibverbs-utils:
# `ibv_devinfo`, to see what the container was given. Its size is in BENCHMARKS.md.
RUN --mount=type=secret,id=ca \
    /usr/local/lib/rig/apt-install.sh libibverbs1 ibverbs-providers librdmacm1 ibverbs-utils
# The Debian packages as installed, for comparing two builds (a mirror moves on; the venv does not)
# and for the SBOM. `make build` labels the image with this file's sha256 (io.yolo-rig.debian-packages).
# The pipe runs under base's SHELL (pipefail), which hadolint does not follow from stage to stage.
# hadolint ignore=DL4006
RUN mkdir -p /opt/rig \
    && dpkg-query -W -f '${Package}=${Version} ${Architecture}\n' | LC_ALL=C sort >/opt/rig/debian-packages.txt

# ---------------------------------------------------------------------------------------------
# What uv.lock says of this stack (torch, CUDA, cuDNN, Ultralytics), read here with the base's
# Python so the host needs none: `make build` turns the file into the image's labels.
FROM base AS lockinfo
ARG STACK=cu121
RUN --mount=type=bind,source=uv.lock,target=/src/uv.lock \
    --mount=type=bind,source=tools/lock_versions.py,target=/src/lock_versions.py \
    mkdir -p /opt/rig \
    && python3 /src/lock_versions.py /src/uv.lock "${STACK}" >/opt/rig/stack-versions.env

# ---------------------------------------------------------------------------------------------
# The SBOM (CycloneDX JSON): cyclonedx-py describes /opt/venv as installed, docker/sbom.py adds the
# runtime's Debian packages. The generator is locked (pyproject.toml's `sbom` group) and lives in
# a venv of its own, in a stage the runtime takes one file from: neither it nor its dependencies
# reach the image's /opt/venv.
FROM builder AS sbom
ARG PYTHON_VERSION
# No bytecode for a venv that runs once; the lock bound as in the builder.
RUN --mount=type=secret,id=ca \
    --mount=type=cache,target=/root/.cache/uv \
    --mount=type=bind,source=uv.lock,target=/src/uv.lock \
    --mount=type=bind,source=pyproject.toml,target=/src/pyproject.toml \
    [ -f /run/secrets/ca ] && export SSL_CERT_FILE=/run/secrets/ca; \
    uv export --offline --quiet --locked --only-group sbom --no-emit-project --no-header \
        --format requirements-txt -o /tmp/sbom-requirements.txt \
    && uv venv --quiet --python "/usr/bin/python${PYTHON_VERSION}" /opt/sbom \
    && UV_COMPILE_BYTECODE=0 uv pip install --python /opt/sbom/bin/python --quiet --require-hashes --no-deps \
        -r /tmp/sbom-requirements.txt
COPY docker/sbom.py /usr/local/lib/rig/sbom.py
COPY --from=os /opt/rig/debian-packages.txt /tmp/debian-packages.txt
COPY --from=os /etc/debian_version /tmp/debian_version
# No timestamp (the builder's SOURCE_DATE_EPOCH is a constant for bytecode, not a date): the same
# lock and packages give the same file, byte for byte. The image's created label carries the date.
# Each Python package carries the SHA-256 uv.lock holds for the wheel installed.
ARG STACK=cu121
RUN --mount=type=bind,source=pyproject.toml,target=/src/pyproject.toml \
    --mount=type=bind,source=uv.lock,target=/src/uv.lock \
    env -u SOURCE_DATE_EPOCH /opt/sbom/bin/cyclonedx-py environment --no-validate --output-reproducible \
        --pyproject /src/pyproject.toml --mc-type application -o /tmp/python.cdx.json /opt/venv/bin/python \
    && mkdir -p /opt/rig \
    && /opt/sbom/bin/python /usr/local/lib/rig/sbom.py --stack "${STACK}" --debian-version "$(cat /tmp/debian_version)" \
        --lock /src/uv.lock --site-packages "/opt/venv/lib/python${PYTHON_VERSION}/site-packages" \
        /tmp/python.cdx.json /tmp/debian-packages.txt >/opt/rig/packages.cdx.json

# ---------------------------------------------------------------------------------------------
FROM os AS runtime

ARG PYTHON_VERSION
COPY --from=pyheaders /usr/include/python${PYTHON_VERSION} /usr/include/python${PYTHON_VERSION}
COPY --from=pyheaders /usr/include/x86_64-linux-gnu/python${PYTHON_VERSION} \
     /usr/include/x86_64-linux-gnu/python${PYTHON_VERSION}
COPY --from=builder /opt/venv /opt/venv

# The NVIDIA container toolkit reads these to inject the driver.
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    VIRTUAL_ENV=/opt/venv \
    PYTHONUNBUFFERED=1 \
    LANG=C.UTF-8

# The unprivileged user; its uid/gid are remapped at start by RIG_UID/RIG_GID.
RUN groupadd --gid 1000 yolo \
    && useradd --uid 1000 --gid 1000 --create-home --shell /bin/bash yolo \
    && mkdir -p /workspace \
    && chown yolo:yolo /workspace

WORKDIR /workspace
EXPOSE 2222 8888 6006

# Ultralytics offline: no connectivity checks or downloads, no pip installs at run time. Its
# settings are the user's, in the `workspace` volume, so `yolo settings` sticks after `down`/`up`;
# `rig exec` seeds them from the defaults baked in /opt/rig/ultralytics (datasets, weights and runs
# in the volumes, offline, fonts, TensorBoard on) the first time, as the user (rig/yolo/settings.py).
ENV YOLO_OFFLINE=true \
    YOLO_AUTOINSTALL=false \
    YOLO_CONFIG_DIR=/workspace/.config
# torch.compile's caches in the `cache` volume: the second run of a model does not compile again.
# The FX graph cache (off by default in torch 2.3) keeps whole compiled graphs, not only kernels, which
# makes a model's second run much shorter than with the kernels alone (BENCHMARKS.md, "torch.compile").
ENV RIG_CACHE_DIR=/cache \
    TORCHINDUCTOR_CACHE_DIR=/cache/torch/inductor \
    TRITON_CACHE_DIR=/cache/torch/triton \
    TORCHINDUCTOR_FX_GRAPH_CACHE=1
# The volumes' mount points, owned by yolo so fresh named volumes are too; baked weights (if any)
# seed a fresh `weights` volume.
COPY --from=tuned /opt/venv/lib/python${PYTHON_VERSION}/site-packages/ultralytics/cfg/default.yaml \
     /opt/venv/lib/python${PYTHON_VERSION}/site-packages/ultralytics/cfg/default.yaml
COPY --from=tuned /opt/rig/configs /opt/rig/configs
COPY --from=tuned /opt/rig/ultralytics /opt/rig/ultralytics
# The user's settings, seeded in the image too, so a fresh `workspace` volume starts with them and a
# process that bypasses `rig exec` (another entrypoint, any uid) still reads the image's defaults;
# sticky and open to all like the baked folder, for Ultralytics' DDP files of such a uid.
RUN install -d -o yolo -g yolo -m 0755 /workspace/.config \
    && install -d -o yolo -g yolo -m 1777 /workspace/.config/Ultralytics \
    && install -o yolo -g yolo -m 0644 /opt/rig/ultralytics/Ultralytics/settings.json /workspace/.config/Ultralytics/ \
    && cp -P /opt/rig/ultralytics/Ultralytics/Arial.ttf /opt/rig/ultralytics/Ultralytics/Arial.Unicode.ttf \
        /workspace/.config/Ultralytics/ \
    && chown -h yolo:yolo /workspace/.config/Ultralytics/Arial.ttf /workspace/.config/Ultralytics/Arial.Unicode.ttf
# Under pytest Ultralytics saves a run without an absolute project= in site-packages/tests/tmp/runs
# (cfg.get_save_dir), read-only here: that folder is a link to the runs volume.
RUN site="/opt/venv/lib/python${PYTHON_VERSION}/site-packages" \
    && mkdir -p "${site}/tests/tmp" \
    && ln -s /workspace/runs "${site}/tests/tmp/runs"
COPY --from=tuned --chown=1000:1000 /opt/rig/weights /weights
RUN mkdir -p /datasets /workspace/runs /cache \
    && chown yolo:yolo /datasets /weights /workspace/runs /cache
# JupyterLab's config folder (the server's JUPYTER_CONFIG_DIR): root's, so nothing in ~/.jupyter
# changes how it authenticates; the marker stops jupyter_core migrating ~/.ipython into it. Its data
# folder (JUPYTER_DATA_DIR): root's and empty, so templates, kernel specs and lab extensions come
# from the image (rig/workstation/services.py). The config turns off what would load code from user
# folders: language servers probed on the PATH, nbconvert templates from the working folder.
RUN mkdir -p /opt/rig/jupyter /opt/rig/jupyter-data \
    && : >/opt/rig/jupyter/migrated
COPY docker/jupyter_server_config.json /opt/rig/jupyter/jupyter_server_config.json
# JupyterLab's server runs from an execute-only copy of the interpreter: the kernel makes a process
# non-dumpable from the exec of a program its user cannot read, so no session of yolo can trace the
# server or take its descriptors and read its token (rig/workstation/tokengate.py). Beside the venv's
# bin/, so it is the venv's Python (pyvenv.cfg one folder up), off the PATH.
RUN install -d -m 0755 /opt/venv/libexec \
    && install -m 0711 "$(readlink -f /opt/venv/bin/python)" /opt/venv/libexec/jupyter-python

# pip for user yolo's sessions (docs/user-environment.md): the builder's own pip (Debian's bundled
# wheel), run only by rig's gate (rig/workstation/pipgate.py), which installs into ~/.local on the
# `home` volume within the image's pins. /opt/venv itself stays as the lock made it.
COPY --from=builder /opt/uv/lib/python${PYTHON_VERSION}/site-packages/pip /opt/rig/pip/pip
COPY docker/session-python /opt/rig/python
COPY docker/pip /usr/local/bin/pip
RUN ln -s pip /usr/local/bin/pip3

# The stack's locked versions (read by `make build` for the labels).
COPY --from=lockinfo /opt/rig/stack-versions.env /opt/rig/stack-versions.env

# Our own code, as late as possible.
COPY --from=project /opt/rig-project/ /opt/venv/
# rig's contract with the image's own Ultralytics, checked once here (rig/yolo/contractcheck.py):
# `rig train` reads the report in milliseconds while those files are unchanged, and checks any other
# Ultralytics a user installs itself. A pin lacking a name rig lists fails the build here.
RUN /opt/venv/bin/python -I -m rig.yolo.contractcheck --bake /opt/rig/ultralytics-contract.json \
    && grep -q '"missing": \[\]' /opt/rig/ultralytics-contract.json
# Every start of the image's Python (python, `yolo`, kernels, `rig train`'s ranks) gives another
# Ultralytics a user installs in ~/.local a settings file of its own schema, seeded from the user's,
# instead of letting it reset theirs (rig/yolo/import_guard.py).
COPY docker/yolo-rig.pth /opt/venv/lib/python${PYTHON_VERSION}/site-packages/yolo-rig.pth
# Every login shell (`docker run IMAGE bash -l`, `make shell`, SSH, Jupyter terminals) gets the
# venv back on PATH after Debian's /etc/profile resets it, and yolo its own packages.
RUN /opt/venv/bin/python -c 'import os; from rig.workstation.userenv import render_profile as r; \
print(r(os.environ["PATH"]), end="")' >/etc/profile.d/rig-session.sh
# The workstation (`rig serve`): sshd's config, and JupyterLab without news or update checks (offline).
COPY docker/sshd_config /etc/ssh/sshd_config
COPY docker/tmux.conf /etc/tmux.conf
COPY docker/jupyter-overrides.json /opt/venv/share/jupyter/lab/settings/overrides.json
# The notebooks, read-only; `rig serve` seeds them into /workspace/notebooks (rig/workstation/workspace.py).
COPY notebooks/ /opt/rig/notebooks/

# Apptainer and Pyxis start the ENTRYPOINT in the host's PID namespace, where tini is not PID 1: as a
# subreaper it still reaps the orphans of its command, and prints no warning about it.
ENV TINI_SUBREAPER=1
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/venv/bin/rig", "exec", "--"]
CMD ["rig", "serve"]
# `rig serve`'s health, for every engine that reads the image's (docker run, compose, Podman): each
# service RUNNING and listening on its own port. As nobody, in isolated mode (no current directory or
# PYTHON* variables on its path): it only reads /run/rig/services.json and /proc/net/tcp. The start
# period covers a start that re-owns the volumes (RIG_REOWN_BUDGET_S, 60 s). A container that runs
# another command (`rig train`) serves nothing: healthy (`rig health` reads PID 1's command line).
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--no-new-privs", \
         "/opt/venv/bin/python", "-I", "-m", "rig", "health"]

# The stack's name, for `rig --version` and `rig doctor` (which stack to use on a GPU this one lacks).
ARG STACK=cu121
ENV RIG_STACK=${STACK}

# Last, so a new revision changes only metadata. The labels that need the lock (torch, CUDA, cuDNN,
# Ultralytics), PYTORCH_VERSION and the Debian package list's digest are added by `make build`
# (tools/label_image.sh), from /opt/rig/stack-versions.env and /opt/rig/debian-packages.txt:
# neither a label nor an ENV can come from a RUN. CREATED is SOURCE_DATE_EPOCH as RFC 3339 (the commit's time).
ARG VERSION=unknown
ARG GIT_REVISION=unknown
ARG SOURCE_URL=""
ARG CREATED=""
ENV RIG_GIT_REVISION=${GIT_REVISION}
LABEL org.opencontainers.image.title="yolo-rig" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${GIT_REVISION}" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="AGPL-3.0-only" \
      io.yolo-rig.stack="${STACK}"

# ---------------------------------------------------------------------------------------------
# The SBOM, of the runtime as it stands: the packages' document from the sbom stage, and every file
# no package installed as it is (rig's configs, the Python headers, /usr/local/bin/pip, what the
# build generated or replaced) with its SHA-256 (docker/sbom_files.py, with the image's own Python).
FROM runtime AS described
ARG PYTHON_VERSION
RUN --mount=type=bind,from=sbom,source=/opt/rig/packages.cdx.json,target=/tmp/sbom/packages.cdx.json \
    --mount=type=bind,source=docker/sbom_files.py,target=/tmp/sbom/sbom_files.py \
    python3 -I /tmp/sbom/sbom_files.py --root / --site-packages "/opt/venv/lib/python${PYTHON_VERSION}/site-packages" \
        /tmp/sbom/packages.cdx.json >/tmp/sbom.cdx.json \
    && mv /tmp/sbom.cdx.json /opt/rig/sbom.cdx.json

# ---------------------------------------------------------------------------------------------
# The driver the stack needs, checked by the NVIDIA container runtime before anything runs: a
# too-old driver fails `docker run --gpus` with the runtime's own one-line "unsatisfied condition:
# cuda>=12.8" instead of deep inside torch (docs/requirements.md). One stage per stack, chosen by
# STACK in the last FROM: an ENV cannot compute the value, and an unknown STACK stops the build.
FROM described AS stack-cu121
ENV NVIDIA_REQUIRE_CUDA="cuda>=12.1"

FROM described AS stack-cu128
ENV NVIDIA_REQUIRE_CUDA="cuda>=12.8"

# hadolint ignore=DL3006
FROM stack-${STACK}
