# yolo-rig: build, run and test the YOLO training image. `make help` lists the targets.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
.DEFAULT_GOAL := help

IMAGE ?= yolo-rig
# The CUDA stack, one of pyproject.toml's extras: cu121 (the default) or cu128 (Blackwell). The tag
# follows it, so `STACK=cu128 make up` runs yolo-rig:cu128.
STACK ?= cu121
TAG ?= $(STACK)
BASE_IMAGE ?= debian:bookworm-slim
APT_MIRROR ?=
DEBOOTSTRAP_MIRROR ?= $(if $(APT_MIRROR),$(APT_MIRROR),http://deb.debian.org/debian)
PIP_INDEX_URL ?= https://pypi.org/simple
# A CA bundle for TLS-intercepting proxies, handed to the build as a secret (never in a layer), and
# mounted into the containers `make up`/`train`/`weights`/`datasets` start (HTTPS_PROXY & co. pass too).
CA_BUNDLE ?= $(wildcard /etc/ssl/certs/ca-certificates.crt)
GIT_REVISION ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
PYTEST_ARGS ?= --durations=30
# Pretrained weights to bake into the image's `weights` volume, e.g. "yolo11n.pt yolo26n.pt"
# (downloaded at build time from Ultralytics' GitHub releases). Empty: nothing is downloaded.
RIG_WEIGHTS ?=
# Ultralytics features left out of the default image, as pyproject.toml's dependency groups:
# FEATURES="openvino streamlit" (docs/ultralytics.md). Empty: none.
FEATURES ?=
VENV ?= .venv

comma := ,
# The stack's versions in uv.lock, as build args for the labels. Recursive (=): the lock is read
# only when `build` expands BUILD_ARGS, never for `help`.
STACK_VERSIONS = $(shell python3 tools/lock_versions.py uv.lock $(STACK))
BUILD_ARGS = --build-arg BASE_IMAGE=$(BASE_IMAGE) --build-arg APT_MIRROR=$(APT_MIRROR) \
	--build-arg PIP_INDEX_URL=$(PIP_INDEX_URL) --build-arg GIT_REVISION=$(GIT_REVISION) \
	--build-arg STACK=$(STACK) $(foreach kv,$(STACK_VERSIONS),--build-arg $(kv)) \
	$(if $(RIG_WEIGHTS),--build-arg RIG_WEIGHTS="$(RIG_WEIGHTS)") \
	$(if $(FEATURES),--build-arg RIG_FEATURES="$(FEATURES)") \
	$(if $(CA_BUNDLE),--secret id=ca$(comma)src=$(CA_BUNDLE))

.PHONY: help
help: ## print every target with its description
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: base-image
base-image: ## build $(BASE_IMAGE) locally from a Debian mirror (debootstrap), for hosts without a registry
	tools/base-image.sh $(BASE_IMAGE) $(DEBOOTSTRAP_MIRROR)

# The lock names the stacks: an unknown STACK stops here in one line. The second step labels the
# image with the sha256 of its Debian package list (a label cannot come from a RUN).
.PHONY: build
build: ## [STACK=cu121|cu128]: build $(IMAGE):$(TAG) from the lock (fails on a stale lock)
	@python3 tools/lock_versions.py uv.lock $(STACK) >/dev/null
	DOCKER_BUILDKIT=1 docker build $(BUILD_ARGS) -t $(IMAGE):$(TAG) .
	tools/label_debian_packages.sh $(IMAGE):$(TAG)

# UPGRADE=1: move every package to its newest allowed version instead of keeping the current pins.
UPGRADE ?=
.PHONY: lock
lock: ## [UPGRADE=1]: resolve pyproject.toml into uv.lock (the only step that resolves)
	uv lock $(if $(UPGRADE),--upgrade)

.PHONY: venv
venv: $(VENV)/.synced ## the host tools for lint and tests (locked dev group, no torch)
$(VENV)/.synced: uv.lock pyproject.toml
	UV_PROJECT_ENVIRONMENT=$(VENV) uv sync --locked --only-group dev
	touch $@

.PHONY: lint
lint: venv ## ruff, mypy on entrypoint/, hadolint on the Dockerfiles
	$(VENV)/bin/ruff check entrypoint tests tools
	$(VENV)/bin/ruff format --check entrypoint tests tools
	$(VENV)/bin/mypy
	$(VENV)/bin/hadolint Dockerfile docker/cluster/Dockerfile

.PHONY: test-unit
test-unit: venv ## the host tests (tests/unit): seconds, no Docker
	PYTHONPATH=entrypoint $(VENV)/bin/pytest tests/unit $(PYTEST_ARGS)

.PHONY: test
test: lint build ## lint, build the image, run every CPU test (tests/unit, then tests/image against it)
	IMAGE=$(IMAGE):$(TAG) PYTHONPATH=entrypoint $(VENV)/bin/pytest -m 'not gpu and not cluster' $(PYTEST_ARGS)

# CI runs `make test` on the default stack, then this on the other: what a stack can break.
.PHONY: test-stack
test-stack: venv build ## STACK=cu128: build $(IMAGE):$(TAG), run the tests marked `stack` (versions, offline round trip, compile, workstation)
	IMAGE=$(IMAGE):$(TAG) PYTHONPATH=entrypoint $(VENV)/bin/pytest -m 'stack and not gpu' $(PYTEST_ARGS)

# As yolo, never root: root's `docker exec` starts in /workspace, where python imports what a user left.
.PHONY: shell
shell: ## a login shell as yolo: in the running workstation, else in a new container
	@if [ -n "$$($(COMPOSE) ps -q workstation 2>/dev/null)" ]; then $(COMPOSE) exec -u yolo workstation bash -l; \
	else docker run --rm -it --shm-size=8g $(IMAGE):$(TAG) bash -l; fi

# Docker's NVIDIA runtime, asked once here and honoured by every compose target: without it
# compose.cpu.yaml is added, so the container starts and `rig` can say what is missing. GPU=no forces
# the CPU overlay, GPU=yes leaves it out. Deferred (?=): docker is asked only when a target uses it.
GPU ?= $(if $(shell docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -o nvidia),yes,no)

# Host folders in place of the named volumes (e.g. DATASETS_DIR=/data make up); empty: the volumes.
DATASETS_DIR ?=
WEIGHTS_DIR ?=
RUNS_DIR ?=
# Files written to host folders belong to whoever runs make: yolo takes the caller's uid/gid when a
# host folder is given, or `make export` writes beside host weights (not root's: uid 0 is refused,
# so root gets the image's 1000 unless RIG_UID says).
host_id = $(if $(DATASETS_DIR)$(WEIGHTS_DIR)$(RUNS_DIR)$(if $(WEIGHTS),$(wildcard $(WEIGHTS))),$(filter-out 0,$(shell id -$(1))))
RIG_UID ?= $(call host_id,u)
RIG_GID ?= $(if $(RIG_UID),$(or $(call host_id,g),$(RIG_UID)))
# NETWORK=host: `make weights`/`make datasets` on the host's network (a mirror on the host's loopback).
NETWORK ?=
compose_env = IMAGE=$(IMAGE):$(TAG) $(foreach v,RIG_UID RIG_GID,$(if $($(v)),$(v)=$($(v)))) \
	$(foreach v,DATASETS_DIR WEIGHTS_DIR RUNS_DIR CA_BUNDLE,$(if $($(v)),$(v)=$(abspath $($(v)))))
compose_for = $(compose_env) docker compose -f compose.yaml $(if $(filter no,$(1)),-f compose.cpu.yaml) \
	$(if $(RUNS_DIR),-f compose.runs.yaml)
COMPOSE = $(call compose_for,$(GPU))
# The export and the demo data run on the CPU: no GPU runtime needed.
COMPOSE_CPU = $(call compose_for,no)
COMPOSE_FETCH = $(COMPOSE_CPU) $(if $(filter host,$(NETWORK)),-f compose.hostnet.yaml)

# A host folder given for a volume must exist and be readable: Docker would create a missing one, as root.
check_dir = [ -z "$(2)" ] || { [ -d "$(2)" ] && [ -r "$(2)" ] && [ -x "$(2)" ]; } \
	|| { echo "ERROR make: $(1)=$(2) is not a readable folder on this host; create it or fix the path"; exit 2; }
.PHONY: host-dirs
host-dirs:
	@$(foreach v,DATASETS_DIR WEIGHTS_DIR RUNS_DIR,$(call check_dir,$(v),$($(v))) && ) true

# The image, built only when it is missing (a fresh clone); `make build` rebuilds after an edit.
.PHONY: image
image:
	@docker image inspect $(IMAGE):$(TAG) >/dev/null 2>&1 || $(MAKE) --no-print-directory build

# The URLs come from the file `rig serve` writes for this (root's), not from the log, which carries
# whatever a kernel prints too.
.PHONY: up
up: host-dirs build ## build if needed, then start the workstation (SSH 2222, JupyterLab 8888), e.g. SSH_PUBLIC_KEY="..." make up
	$(COMPOSE) up -d --wait
	@$(COMPOSE) exec -T workstation cat /run/rig/urls
	@echo "INFO metrics: http://$$($(COMPOSE) port workstation 9464)/metrics while \`rig train\` runs (Prometheus text; this host only)"
	@echo "Next: \`make demo-data\` then \`make train\` (a generated dataset), or your own:"
	@echo "  \`make train DATA=path/to/data.yaml MODEL=yolo11n.pt\` (\`make weights W=yolo11n.pt\` fetches it);"
	@echo "  host folders as the volumes: DATASETS_DIR=... WEIGHTS_DIR=... RUNS_DIR=... make up (docs/data.md)"

.PHONY: down
down: ## stop and remove the workstation (the volumes stay; `docker compose down -v` deletes them)
	$(COMPOSE) down

.PHONY: logs
logs: ## follow the workstation's log
	$(COMPOSE) logs -f workstation

# WEIGHTS: a host file if one exists at that path (its folder is mounted; the .onnx lands beside it),
# else a path in the workstation, relative to /workspace (e.g. runs/detect/train/weights/best.pt).
WEIGHTS ?=
FORMAT ?= onnx
EXPORT_ARGS ?=
.PHONY: export
export: host-dirs | image ## WEIGHTS=... [FORMAT=onnx]: export (simplified) and check it against PyTorch with onnxruntime
	@[ -n "$(WEIGHTS)" ] || { echo "ERROR make: give WEIGHTS=path/to/best.pt (a host file or a path in /workspace)"; exit 2; }
	$(COMPOSE_CPU) run --rm --no-deps $(if $(wildcard $(WEIGHTS)),-v $(abspath $(dir $(WEIGHTS))):/export) \
		workstation rig export --format $(FORMAT) $(EXPORT_ARGS) \
		$(if $(wildcard $(WEIGHTS)),/export/$(notdir $(WEIGHTS)),$(WEIGHTS))

# `make train`: the job in a one-shot workstation container (same volumes, shm and GPU reservation).
# DATA and MODEL: a host file if one exists at that path (its folder is mounted read-only at
# /mnt/data or /mnt/model; rig resolves the data.yaml's paths there), else a path in the container
# (DATA=/datasets/mine/data.yaml, MODEL=yolo11s.pt from /weights). Empty DATA: the demo dataset.
# RIG_ARGS_FROM=make: rig's errors name these variables (GPUS=9) instead of the options (--gpus 9).
GPUS ?=
DATA ?=
MODEL ?=
EPOCHS ?=
IMGSZ ?=
BATCH ?=
TRAIN_ARGS ?=
host_dir_of = $(abspath $(dir $(1)))
DATA_HOST = $(if $(DATA),$(wildcard $(DATA)))
MODEL_HOST = $(if $(MODEL),$(wildcard $(MODEL)))
TRAIN_MOUNTS = $(if $(DATA_HOST),-v $(call host_dir_of,$(DATA)):/mnt/data:ro \
		-e RIG_DATA_HOST_DIR=$(call host_dir_of,$(DATA))) \
	$(if $(MODEL_HOST),-v $(call host_dir_of,$(MODEL)):/mnt/model:ro)

.PHONY: train
train: host-dirs | image ## [GPUS=N|all|0,2] DATA= MODEL= EPOCHS= IMGSZ= BATCH= TRAIN_ARGS=: train on GPUs (demo data by default)
	$(COMPOSE) run --rm --no-deps -e RIG_ARGS_FROM=make $(TRAIN_MOUNTS) workstation rig train $(if $(GPUS),--gpus $(GPUS)) \
		$(if $(DATA),data=$(if $(DATA_HOST),/mnt/data/$(notdir $(DATA)),$(DATA))) \
		$(if $(MODEL),model=$(if $(MODEL_HOST),/mnt/model/$(notdir $(MODEL)),$(MODEL))) \
		$(if $(EPOCHS),epochs=$(EPOCHS)) $(if $(IMGSZ),imgsz=$(IMGSZ)) $(if $(BATCH),batch=$(BATCH)) $(TRAIN_ARGS)

# `make weights` / `make datasets`: the one step that downloads (training stays offline), from
# Ultralytics' GitHub release or RIG_ASSETS_URL (a mirror), checked, into /weights or /datasets.
W ?=
D ?=
RIG_ASSETS_URL ?=
.PHONY: weights
weights: host-dirs | image ## W="yolo11n.pt yolo11s.pt[@sha256:HEX]" [RIG_ASSETS_URL=mirror]: download weights into /weights
	@[ -n "$(W)" ] || { echo "ERROR make: give W=yolo11n.pt (one or more, space-separated)"; exit 2; }
	RIG_ASSETS_URL=$(RIG_ASSETS_URL) $(COMPOSE_FETCH) run --rm --no-deps workstation rig weights get $(W)

.PHONY: datasets
datasets: host-dirs | image ## D="coco8.yaml coco128.yaml" [RIG_ASSETS_URL=mirror]: download Ultralytics' named datasets into /datasets
	@[ -n "$(D)" ] || { echo "ERROR make: give D=coco8.yaml (one or more, space-separated)"; exit 2; }
	RIG_ASSETS_URL=$(RIG_ASSETS_URL) $(COMPOSE_FETCH) run --rm --no-deps workstation rig datasets get $(D)

# `make demo-data`: the generated shapes dataset in the `datasets` volume, where `make train` looks.
DEMO_ARGS ?=
.PHONY: demo-data
demo-data: host-dirs | image ## [DEMO_ARGS="--train 256 --imgsz 640 --seed 1 --force"]: generate /datasets/demo
	$(COMPOSE_CPU) run --rm --no-deps workstation rig demo-data /datasets/demo $(DEMO_ARGS)

# `make bench`: the table on the terminal, the JSON in $(BENCH_JSON). On the GPUs when Docker has them.
BENCH_ARGS ?=
BENCH_JSON ?= bench.json
.PHONY: bench
bench: host-dirs | image ## [BENCH_ARGS="--quick --no-amp --compile --imgsz 640 --batch 16 --workers 8 --data Y"]: loader vs step
	$(COMPOSE) run --rm --no-deps -T workstation rig bench --json - $(BENCH_ARGS) > $(BENCH_JSON)

# `make bench-cli`: `rig --version`, `--help` and the healthcheck's start-up against a bare Python,
# inside the image (tools/measure_cli.py on its stdin, stdlib only).
.PHONY: bench-cli
bench-cli: | image ## start-up of `rig --version`/`--help`/`health` against `python -c pass`, in the image (20 runs each)
	docker run --rm -i --entrypoint /opt/venv/bin/python $(IMAGE):$(TAG) - --runs 20 < tools/measure_cli.py

# The local Slurm cluster (docker/cluster/): a controller and two compute nodes from a test layer on
# the image, compose project $(CLUSTER_PROJECT); the tests marked `cluster` run against it.
CLUSTER_IMAGE ?= $(IMAGE):$(TAG)-slurm
# Another name runs a second cluster beside the first (its own containers, network and volumes).
CLUSTER_PROJECT ?= yolo-rig-cluster
# The cluster's user, as on a real cluster: not the image's yolo (uid 1000); cluster-shell is theirs.
CLUSTER_USER ?= alice
CLUSTER = CLUSTER_IMAGE=$(CLUSTER_IMAGE) docker compose -p $(CLUSTER_PROJECT) -f docker/cluster/compose.yaml
CMD ?=
# The demo dataset on the shared file system, small enough for CPU ranks.
CLUSTER_DEMO_ARGS ?= --train 32 --val 8 --imgsz 96

.PHONY: cluster-image
cluster-image: image ## [STACK=...]: build $(CLUSTER_IMAGE), the image plus Debian's Slurm and MUNGE
	DOCKER_BUILDKIT=1 docker build --build-arg IMAGE=$(IMAGE):$(TAG) --build-arg APT_MIRROR=$(APT_MIRROR) \
		--build-arg CLUSTER_USER=$(CLUSTER_USER) \
		$(if $(CA_BUNDLE),--secret id=ca$(comma)src=$(CA_BUNDLE)) -t $(CLUSTER_IMAGE) docker/cluster

.PHONY: cluster-up
cluster-up: cluster-image ## start the local Slurm cluster (controller, node0, node1) with the demo dataset
	$(CLUSTER) up -d --wait
	$(CLUSTER) exec -T -u yolo controller bash -lc '[ -f /shared/datasets/demo/data.yaml ] \
		|| rig demo-data /shared/datasets/demo $(CLUSTER_DEMO_ARGS) >/dev/null'
	@echo "Next: make cluster-shell, then sbatch /opt/rig/deploy/slurm.sbatch (docs/training.md: Multi-node)"

# CMD is handed to bash as given, quotes, $ and all: its unexpanded value, single-quoted.
.PHONY: cluster-shell
cluster-shell: ## [CMD='squeue'] [CLUSTER_USER=alice]: a login shell (or CMD) as the cluster's user on its submit host
	$(CLUSTER) exec $$([ -t 0 ] || echo -T) -u $(CLUSTER_USER) -w /home/$(CLUSTER_USER) controller bash -l \
		$(if $(value CMD),-c '$(subst ','"'"',$(value CMD))')

.PHONY: cluster-down
cluster-down: ## remove the local cluster's containers and volumes
	$(CLUSTER) down --volumes --remove-orphans --timeout 10

# The cluster always goes, also when a test fails.
.PHONY: test-cluster
test-cluster: venv ## start the local cluster, run the tests marked `cluster` on it, remove it
	rc=0; $(MAKE) --no-print-directory cluster-up \
		&& CLUSTER_IMAGE=$(CLUSTER_IMAGE) CLUSTER_PROJECT=$(CLUSTER_PROJECT) IMAGE=$(IMAGE):$(TAG) PYTHONPATH=entrypoint \
			CLUSTER_USER=$(CLUSTER_USER) $(VENV)/bin/pytest -m cluster tests/cluster $(PYTEST_ARGS) || rc=$$?; \
	$(MAKE) --no-print-directory cluster-down; exit $$rc
