# yolo-rig: build, run and test the YOLO training image. `make help` lists the targets.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
.DEFAULT_GOAL := help

IMAGE ?= yolo-rig
TAG ?= cu121
BASE_IMAGE ?= debian:bookworm-slim
APT_MIRROR ?=
DEBOOTSTRAP_MIRROR ?= $(if $(APT_MIRROR),$(APT_MIRROR),http://deb.debian.org/debian)
PIP_INDEX_URL ?= https://pypi.org/simple
# A CA bundle for TLS-intercepting proxies, handed to the build as a secret (never in a layer).
CA_BUNDLE ?= $(wildcard /etc/ssl/certs/ca-certificates.crt)
GIT_REVISION ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
PYTEST_ARGS ?=
# Pretrained weights to bake into the image's `weights` volume, e.g. "yolo11n.pt yolo26n.pt"
# (downloaded at build time from Ultralytics' GitHub releases). Empty: nothing is downloaded.
RIG_WEIGHTS ?=
VENV ?= .venv

comma := ,
# Recursive (=): the lock is read only when `build` expands BUILD_ARGS, never for `help`.
STACK = $(shell python3 tools/lock_versions.py uv.lock)
BUILD_ARGS = --build-arg BASE_IMAGE=$(BASE_IMAGE) --build-arg APT_MIRROR=$(APT_MIRROR) \
	--build-arg PIP_INDEX_URL=$(PIP_INDEX_URL) --build-arg GIT_REVISION=$(GIT_REVISION) \
	$(foreach kv,$(STACK),--build-arg $(kv)) \
	$(if $(RIG_WEIGHTS),--build-arg RIG_WEIGHTS="$(RIG_WEIGHTS)") \
	$(if $(CA_BUNDLE),--secret id=ca$(comma)src=$(CA_BUNDLE))

.PHONY: help
help: ## print every target with its description
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: base-image
base-image: ## build $(BASE_IMAGE) locally from a Debian mirror (debootstrap), for hosts without a registry
	tools/base-image.sh $(BASE_IMAGE) $(DEBOOTSTRAP_MIRROR)

.PHONY: build
build: ## build $(IMAGE):$(TAG) from the lock (fails on a stale lock)
	DOCKER_BUILDKIT=1 docker build $(BUILD_ARGS) -t $(IMAGE):$(TAG) .

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
lint: venv ## ruff, mypy on entrypoint/, hadolint on the Dockerfile
	$(VENV)/bin/ruff check entrypoint tests tools
	$(VENV)/bin/ruff format --check entrypoint tests tools
	$(VENV)/bin/mypy
	$(VENV)/bin/hadolint Dockerfile

.PHONY: test-unit
test-unit: venv ## the host tests (tests/unit): seconds, no Docker
	PYTHONPATH=entrypoint $(VENV)/bin/pytest tests/unit $(PYTEST_ARGS)

.PHONY: test
test: lint build ## lint, build the image, run every CPU test (tests/unit, then tests/image against it)
	IMAGE=$(IMAGE):$(TAG) PYTHONPATH=entrypoint $(VENV)/bin/pytest -m 'not gpu' $(PYTEST_ARGS)

# As yolo, never root: root's `docker exec` starts in /workspace, where python imports what a user left.
.PHONY: shell
shell: ## a login shell as yolo: in the running workstation, else in a new container
	@if [ -n "$$($(COMPOSE) ps -q workstation 2>/dev/null)" ]; then $(COMPOSE) exec -u yolo workstation bash -l; \
	else docker run --rm -it --shm-size=8g $(IMAGE):$(TAG) bash -l; fi

# Docker's NVIDIA runtime, asked once here and honoured by every compose target: without it
# compose.cpu.yaml is added, so the container starts and `rig` can say what is missing. GPU=no forces
# the CPU overlay, GPU=yes leaves it out. Deferred (?=): docker is asked only when a target uses it.
GPU ?= $(if $(shell docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -o nvidia),yes,no)
compose_for = IMAGE=$(IMAGE):$(TAG) docker compose -f compose.yaml $(if $(filter no,$(1)),-f compose.cpu.yaml)
COMPOSE = $(call compose_for,$(GPU))
# The export and the demo data run on the CPU: no GPU runtime needed.
COMPOSE_CPU = $(call compose_for,no)

.PHONY: up
up: build ## build if needed, then start the workstation (SSH 2222, JupyterLab 8888), e.g. SSH_PUBLIC_KEY="..." make up
	$(COMPOSE) up -d --wait
	@$(COMPOSE) logs --no-color --no-log-prefix workstation | grep -E 'INFO serve: (SSH|JupyterLab)'

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
export: ## WEIGHTS=... [FORMAT=onnx]: export (simplified) and check it against PyTorch with onnxruntime
	@[ -n "$(WEIGHTS)" ] || { echo "ERROR make: give WEIGHTS=path/to/best.pt (a host file or a path in /workspace)"; exit 2; }
	$(COMPOSE_CPU) run --rm --no-deps $(if $(wildcard $(WEIGHTS)),-v $(abspath $(dir $(WEIGHTS))):/export) \
		workstation rig export --format $(FORMAT) $(EXPORT_ARGS) \
		$(if $(wildcard $(WEIGHTS)),/export/$(notdir $(WEIGHTS)),$(WEIGHTS))

# `make train`: the job in a one-shot workstation container (same volumes, shm and GPU reservation).
# Paths are inside the container: DATA=/datasets/mine/data.yaml. Empty DATA: the demo dataset.
# RIG_ARGS_FROM=make: rig's errors name these variables (GPUS=9) instead of the options (--gpus 9).
GPUS ?=
DATA ?=
MODEL ?=
EPOCHS ?=
IMGSZ ?=
BATCH ?=
TRAIN_ARGS ?=

.PHONY: train
train: ## [GPUS=N|all|0,2] DATA= MODEL= EPOCHS= IMGSZ= BATCH= TRAIN_ARGS=: train on GPUs (demo data by default)
	$(COMPOSE) run --rm --no-deps -e RIG_ARGS_FROM=make workstation rig train $(if $(GPUS),--gpus $(GPUS)) \
		$(if $(DATA),data=$(DATA)) $(if $(MODEL),model=$(MODEL)) $(if $(EPOCHS),epochs=$(EPOCHS)) \
		$(if $(IMGSZ),imgsz=$(IMGSZ)) $(if $(BATCH),batch=$(BATCH)) $(TRAIN_ARGS)

# `make demo-data`: the generated shapes dataset in the `datasets` volume, where `make train` looks.
DEMO_ARGS ?=
.PHONY: demo-data
demo-data: ## [DEMO_ARGS="--train 256 --imgsz 640 --seed 1 --force"]: generate /datasets/demo
	$(COMPOSE_CPU) run --rm --no-deps workstation rig demo-data /datasets/demo $(DEMO_ARGS)

# `make bench`: the table on the terminal, the JSON in $(BENCH_JSON). On the GPUs when Docker has them.
BENCH_ARGS ?=
BENCH_JSON ?= bench.json
.PHONY: bench
bench: ## [BENCH_ARGS="--quick --no-amp --compile --imgsz 640 --batch 16 --workers 8 --data Y"]: loader vs step
	$(COMPOSE) run --rm --no-deps -T workstation rig bench --json - $(BENCH_ARGS) > $(BENCH_JSON)
