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
VENV ?= .venv

comma := ,
STACK := $(shell python3 tools/lock_versions.py uv.lock)
BUILD_ARGS := --build-arg BASE_IMAGE=$(BASE_IMAGE) --build-arg APT_MIRROR=$(APT_MIRROR) \
	--build-arg PIP_INDEX_URL=$(PIP_INDEX_URL) --build-arg GIT_REVISION=$(GIT_REVISION) \
	$(foreach kv,$(STACK),--build-arg $(kv)) \
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

.PHONY: lock
lock: ## re-resolve pyproject.toml into uv.lock (the only step that resolves)
	uv lock --upgrade-package yolo-rig

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

.PHONY: test
test: lint build ## lint, build the image, run every CPU test against it
	IMAGE=$(IMAGE):$(TAG) PYTHONPATH=entrypoint $(VENV)/bin/pytest -m 'not gpu' $(PYTEST_ARGS)

.PHONY: shell
shell: ## an interactive shell in the image
	docker run --rm -it --shm-size=8g $(IMAGE):$(TAG) bash
