# yolo-rig: build, run and test the YOLO training image. `make help` lists the targets.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
.DEFAULT_GOAL := help

# The image: IMAGE:TAG, e.g. yolo-rig:cu121. An IMAGE that carries its own tag or digest
# (registry.example.com/yolo-rig:0.2.0-cu121) names the image whole. A name with a registry or
# namespace (it holds a /) is a published image: pulled when missing, never built by `make up`.
IMAGE ?= yolo-rig
# The CUDA stack, one of pyproject.toml's extras: cu121 (the default) or cu128 (Blackwell). The tag
# follows it, so `STACK=cu128 make up` runs yolo-rig:cu128; each stack is its own compose project.
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
# The image's created label: the commit's time (reproducible), else now.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || date +%s)
# The source label: where the code is published (CI passes its forge's URL); default: git's origin.
SOURCE_URL ?= $(shell git config --get remote.origin.url 2>/dev/null)
# Where a pushed image goes: host[:port][/path] (`make push`).
REGISTRY ?=
# Signed images (docs/image.md#signed-images-and-provenance). `make push` signs the pushed digest and
# attaches the SBOM and the build's provenance with cosign: with COSIGN_KEY (a key file, its password
# in COSIGN_PASSWORD, or a KMS URI cosign knows), else keyless where a CI gives an OIDC token (GitHub
# Actions' id-token, SIGSTORE_ID_TOKEN). A published IMAGE pinned by digest is verified before
# `make up`, `make train` and the other targets run it, against COSIGN_PUBLIC_KEY, or keyless against
# COSIGN_IDENTITY (the signer's identity, a regular expression) and COSIGN_OIDC_ISSUER.
COSIGN_KEY ?=
COSIGN_PUBLIC_KEY ?=
COSIGN_IDENTITY ?=
COSIGN_OIDC_ISSUER ?= https://token.actions.githubusercontent.com
# yes: key signatures are recorded in Sigstore's transparency log (Rekor) and checked there; no (a
# registry and hosts without Rekor): neither. Keyless signing always uses it.
COSIGN_TLOG ?= no
PYTEST_ARGS ?= --durations=30
# Processes make test and make test-unit spread the tests over (pytest-xdist), each test file whole
# in one of them so its fixtures are made once; 0: all in pytest's own process.
PYTEST_WORKERS ?= 2
XDIST = $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder)
# Pretrained weights to bake into the image's `weights` volume, e.g. "yolo11n.pt yolo26n.pt"
# (downloaded at build time from Ultralytics' GitHub releases). Empty: nothing is downloaded.
RIG_WEIGHTS ?=
# Ultralytics features left out of the default image, as pyproject.toml's dependency groups:
# FEATURES="openvino streamlit" (docs/ultralytics.md). Empty: none.
FEATURES ?=
# Where `make build` writes the image's SBOM (also in the image at /opt/rig/sbom.cdx.json).
SBOM_DIR ?= build
VENV ?= .venv
# The settings `make up` keeps for the next make and `docker compose` calls: Compose's .env.
ENV_FILE ?= .env

# Read with sed and git, never the host's Python: `make up` needs only Docker and make.
# The release (pyproject.toml's version): images are tagged VERSION-STACK beside STACK.
VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml | head -n 1)
# The stacks: pyproject.toml's optional dependencies.
STACKS := $(shell sed -n '/^\[project.optional-dependencies\]/,/^\[/s/^\([a-z0-9_-]*\) = \[.*/\1/p' pyproject.toml)

comma := ,
empty :=
space := $(empty) $(empty)
image_has_tag = $(or $(findstring @,$(IMAGE)),$(findstring :,$(lastword $(subst /, ,$(IMAGE)))))
REF = $(if $(image_has_tag),$(IMAGE),$(IMAGE):$(TAG))
IMAGE_NAME = $(if $(image_has_tag),$(firstword $(subst @, ,$(patsubst %:$(lastword $(subst :, ,$(IMAGE))),%,$(IMAGE)))),$(IMAGE))
PUBLISHED = $(findstring /,$(IMAGE))
# What `make up` runs, named so it can be checked: the registry digest (a pulled image; an image
# built here has only its ID) and the revision it was built from.
IMAGE_LINE = INFO image: $(REF) {{if .RepoDigests}}{{index .RepoDigests 0}}{{else}}{{.Id}} (built here, no registry digest){{end}}, revision {{index .Config.Labels "org.opencontainers.image.revision"}}
# What compose does with a missing image, as make does: pull a published one, never a local name
# (make builds it). PULL_POLICY=always on the command line refreshes a moving tag.
PULL_POLICY = $(if $(PUBLISHED),missing,never)
CREATED = $(shell date -u -d @$(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ)
BUILD_ARGS = --build-arg BASE_IMAGE=$(BASE_IMAGE) --build-arg APT_MIRROR=$(APT_MIRROR) \
	--build-arg PIP_INDEX_URL=$(PIP_INDEX_URL) --build-arg STACK=$(STACK) \
	--build-arg VERSION=$(VERSION) --build-arg GIT_REVISION=$(GIT_REVISION) \
	--build-arg SOURCE_URL=$(SOURCE_URL) --build-arg CREATED=$(CREATED) \
	$(if $(RIG_WEIGHTS),--build-arg RIG_WEIGHTS="$(RIG_WEIGHTS)") \
	$(if $(FEATURES),--build-arg RIG_FEATURES="$(FEATURES)") \
	$(if $(CA_BUNDLE),--secret id=ca$(comma)src=$(CA_BUNDLE))

# The settings `make up` saved in $(ENV_FILE), under the command line and the environment (a value
# quoted by hand, as Compose allows, is read without its quotes).
SAVED := DATASETS_DIR WEIGHTS_DIR RUNS_DIR CACHE_DIR RIG_UID RIG_GID
saved_value = $(shell sed -n 's/^$(1)=//p' $(ENV_FILE) 2>/dev/null | tail -n 1 | sed "s/^\(['\"]\)\(.*\)\1$$/\2/")
$(foreach v,$(SAVED),$(if $(call saved_value,$(v)),$(eval $(v) ?= $(subst $$,$$$$,$(call saved_value,$(v))))))

.PHONY: help
help: ## print every target with its description
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: base-image
base-image: ## build $(BASE_IMAGE) locally from a Debian mirror (debootstrap), for hosts without a registry
	tools/base-image.sh $(BASE_IMAGE) $(DEBOOTSTRAP_MIRROR)

.PHONY: version
version: ## print the release's version (pyproject.toml), which images are tagged with: VERSION-STACK
	@echo $(VERSION)

# An unknown STACK stops here in one line. The build reads the lock itself (the host needs no
# Python); tools/label_image.sh then adds the labels that come from inside the image (the lock's
# versions, the Debian package list's digest) and copies the SBOM out to $(SBOM_DIR).
.PHONY: build
build: settings ## [STACK=cu121|cu128]: build $(IMAGE):$(TAG) and :VERSION-STACK from the lock (fails on a stale lock), its SBOM in build/
	@$(if $(filter $(STACK),$(STACKS)),true,echo "ERROR make: STACK=$(STACK) is not a stack of pyproject.toml (one of: $(STACKS))"; exit 2)
	DOCKER_BUILDKIT=1 docker build $(BUILD_ARGS) -t $(REF) .
	tools/label_image.sh $(REF) $(SBOM_DIR)/yolo-rig-$(VERSION)-$(STACK).cdx.json
	tools/provenance.sh $(REF) $(PROVENANCE) $(BASE_IMAGE) BASE_IMAGE=$(BASE_IMAGE) APT_MIRROR=$(APT_MIRROR) \
		PIP_INDEX_URL=$(PIP_INDEX_URL) STACK=$(STACK) VERSION=$(VERSION) GIT_REVISION=$(GIT_REVISION) \
		SOURCE_URL=$(SOURCE_URL) CREATED=$(CREATED) RIG_WEIGHTS="$(RIG_WEIGHTS)" RIG_FEATURES="$(FEATURES)"
	docker tag $(REF) $(IMAGE_NAME):$(VERSION)-$(STACK)

# The built image as REGISTRY/yolo-rig, tagged with its stack (moving: the newest release) and
# VERSION-STACK (fixed). Only an image built from this checkout's revision goes out.
.PHONY: push
push: settings ## REGISTRY=host[:port][/path] [COSIGN_KEY=...]: push the built image as REGISTRY/yolo-rig:STACK and :VERSION-STACK, signed, its SBOM and provenance attached
	@[ -n "$(REGISTRY)" ] || { echo "ERROR make: give REGISTRY=host[:port][/path], e.g. REGISTRY=registry.example.com/ml"; exit 2; }
	@revision=$$(docker image inspect -f '{{index .Config.Labels "org.opencontainers.image.revision"}}' $(REF) 2>/dev/null) \
		|| { echo "ERROR make: $(REF) is not built; run make build STACK=$(STACK) first"; exit 2; }; \
	[ "$$revision" = "$(GIT_REVISION)" ] \
		|| { echo "ERROR make: $(REF) was built from revision $$revision, this checkout is $(GIT_REVISION); run make build first"; exit 2; }
	@git diff --quiet HEAD -- 2>/dev/null || echo "WARNING make: the checkout has uncommitted changes; the image's revision label names the commit only"
	@$(if $(COSIGN_KEY)$(OIDC_TOKEN),$(SIGN_CHECK))
	@for tag in $(STACK) $(VERSION)-$(STACK); do \
		docker tag $(REF) $(REGISTRY)/yolo-rig:$$tag && docker push --quiet $(REGISTRY)/yolo-rig:$$tag >/dev/null || exit; \
		digest=$$(docker image inspect -f '{{range .RepoDigests}}{{println .}}{{end}}' $(REGISTRY)/yolo-rig:$$tag \
			| grep -F "$(REGISTRY)/yolo-rig@" | head -n 1); \
		echo "INFO make: pushed $(REGISTRY)/yolo-rig:$$tag, pinned: IMAGE=$$digest"; \
	done
	@digest=$$(docker image inspect -f '{{range .RepoDigests}}{{println .}}{{end}}' $(REGISTRY)/yolo-rig:$(VERSION)-$(STACK) \
		| grep -F "$(REGISTRY)/yolo-rig@" | head -n 1); \
	$(if $(COSIGN_KEY)$(OIDC_TOKEN),$(SIGN),echo "WARNING make: $$digest is not signed: give COSIGN_KEY (docs/image.md#signed-images-and-provenance)")

# The build's provenance (tools/provenance.sh), beside its SBOM.
PROVENANCE = $(SBOM_DIR)/yolo-rig-$(VERSION)-$(STACK).provenance.json
# A CI's OIDC token for keyless signing (GitHub Actions with `id-token: write`, or Sigstore's own).
OIDC_TOKEN = $(ACTIONS_ID_TOKEN_REQUEST_URL)$(SIGSTORE_ID_TOKEN)
COSIGN_SIGN_FLAGS = $(if $(COSIGN_KEY),--key $(COSIGN_KEY) $(if $(filter yes,$(COSIGN_TLOG)),,--tlog-upload=false))
COSIGN_LOG = $(SBOM_DIR)/cosign.log
# Before anything is pushed: cosign is there, and the provenance is this image's (not an earlier build's).
SIGN_CHECK = command -v cosign >/dev/null || { echo "ERROR make: signing needs cosign on this host (Debian trixie's package, sigstore's release); or push without COSIGN_KEY"; exit 2; }; \
	[ -f $(PROVENANCE) ] && [ "$$(sed -n 's/^ *"imageId": "\(.*\)",*$$/\1/p' $(PROVENANCE))" = "$$(docker image inspect -f '{{.Id}}' $(REF))" ] \
		|| { echo "ERROR make: $(PROVENANCE) is not $(REF)'s provenance; run make build STACK=$(STACK) again"; exit 2; }
# The digest signed, then the SBOM (read from the image itself) and the provenance attached to it.
SIGN = mkdir -p $(SBOM_DIR) && sbom=$$(mktemp) && docker run --rm --network none --entrypoint cat $(REF) /opt/rig/sbom.cdx.json >"$$sbom" \
	&& { cosign sign --yes $(COSIGN_SIGN_FLAGS) "$$digest" \
		&& cosign attest --yes $(COSIGN_SIGN_FLAGS) --type cyclonedx --predicate "$$sbom" "$$digest" \
		&& cosign attest --yes $(COSIGN_SIGN_FLAGS) --type slsaprovenance1 --predicate $(PROVENANCE) "$$digest"; \
	} >$(COSIGN_LOG) 2>&1 && rm -f "$$sbom" \
	&& echo "INFO make: signed $$digest and attached its SBOM (CycloneDX) and provenance (SLSA v1): cosign verify --key cosign.pub $$digest" \
	|| { rm -f "$$sbom"; tail -n 5 $(COSIGN_LOG); echo "ERROR make: signing $$digest failed (cosign's output above, all of it in $(COSIGN_LOG))"; exit 2; }
# `make up` & co. with a published IMAGE pinned by digest and a key or identity to trust: cosign's
# verdict first, one line when it refuses (no signature, another key's, a digest nobody signed).
VERIFY_FLAGS = $(if $(COSIGN_PUBLIC_KEY),--key $(COSIGN_PUBLIC_KEY) $(if $(filter yes,$(COSIGN_TLOG)),,--insecure-ignore-tlog=true),--certificate-identity-regexp '$(COSIGN_IDENTITY)' --certificate-oidc-issuer $(COSIGN_OIDC_ISSUER))
TRUSTED = $(COSIGN_PUBLIC_KEY)$(COSIGN_IDENTITY)

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
lint: venv ## ruff, mypy on entrypoint/, hadolint on the Dockerfiles, actionlint on .github/workflows/
	$(VENV)/bin/ruff check entrypoint tests tools docker/sbom.py docker/sbom_files.py docker/cluster/apptainer.py
	$(VENV)/bin/ruff format --check entrypoint tests tools docker/sbom.py docker/sbom_files.py docker/cluster/apptainer.py
	$(VENV)/bin/mypy
	$(VENV)/bin/hadolint Dockerfile docker/cluster/Dockerfile
	PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/actionlint

.PHONY: test-unit
test-unit: venv ## the host tests (tests/unit): seconds, no Docker
	PYTHONPATH=entrypoint $(VENV)/bin/pytest $(XDIST) tests/unit $(PYTEST_ARGS)

.PHONY: test
test: lint build ## lint, build the image, run every CPU test (tests/unit, then tests/image against it)
	IMAGE=$(REF) PYTHONPATH=entrypoint $(VENV)/bin/pytest $(XDIST) -m 'not gpu and not cluster and not ultralytics_window' $(PYTEST_ARGS)

# The tested window of Ultralytics releases: the image's pin (pyproject.toml) is the newest, the oldest
# is rig/yolo/contract.py's WINDOW. V= any release (its wheel is downloaded and checked on the host).
ULTRALYTICS_OLDEST := $(shell sed -n 's/^WINDOW = Window(oldest="\(.*\)")$$/\1/p' entrypoint/rig/yolo/contract.py)
V ?= $(ULTRALYTICS_OLDEST)
.PHONY: test-ultralytics
test-ultralytics: venv | image ## [V=X]: the image with Ultralytics X in place of its pin (default: the tested window's oldest): train, stop, resume, device tail, plain yolo
	IMAGE=$(REF) ULTRALYTICS_VERSION=$(V) PYTHONPATH=entrypoint $(VENV)/bin/pytest -m ultralytics_window tests/image/test_ultralytics_window.py $(PYTEST_ARGS)

# Move the image's Ultralytics to release V: the pin, the lock, then the contract checked against V's
# source (seconds, no Docker). `make build` and `make test` follow.
.PHONY: bump-ultralytics
bump-ultralytics: venv ## V=X: pin Ultralytics X (pyproject.toml, uv.lock) and check rig's contract against its source
	@[ -n "$(filter-out $(ULTRALYTICS_OLDEST),$(V))" ] || { echo "ERROR make: give the release to move to, e.g. make bump-ultralytics V=8.4.191"; exit 2; }
	sed -i 's/"ultralytics-opencv-headless==[^"]*"/"ultralytics-opencv-headless==$(V)"/' pyproject.toml
	uv lock --upgrade-package ultralytics-opencv-headless
	PYTHONPATH=entrypoint $(VENV)/bin/pytest tests/unit/yolo/test_contract.py tests/unit/test_ultralytics_boundary.py tests/unit/test_lock_versions.py $(PYTEST_ARGS)

# CI runs `make test` on the default stack, then this on the other: what a stack can break.
.PHONY: test-stack
test-stack: venv build ## STACK=cu128: build $(IMAGE):$(TAG), run the tests marked `stack` (versions, offline round trip, compile, workstation)
	IMAGE=$(REF) PYTHONPATH=entrypoint $(VENV)/bin/pytest $(XDIST) -m 'stack and not gpu' $(PYTEST_ARGS)

# As yolo, never root: root's `docker exec` starts in /workspace, where python imports what a user left.
.PHONY: shell
shell: settings | image ## a login shell as yolo: in the running workstation, else in a new container
	@if [ -n "$$($(COMPOSE) ps -q workstation 2>/dev/null)" ]; then $(COMPOSE) exec -u yolo workstation bash -l; \
	else docker run --rm -it --pull never --shm-size=8g $(REF) bash -l; fi

# Docker's NVIDIA runtime, asked once here and honoured by every compose target: without it
# compose.cpu.yaml is added, so the container starts and `rig` can say what is missing. CPU_ONLY=yes
# forces the CPU overlay, CPU_ONLY=no leaves it out (GPUS picks the GPUs). Deferred (?=): docker is
# asked only when a target uses it.
CPU_ONLY ?= $(if $(shell docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -o nvidia),no,yes)

# Host folders in place of the named volumes (e.g. DATASETS_DIR=/data make up); empty: the volumes.
# `make up` saves them in $(ENV_FILE) for the next calls.
DATASETS_DIR ?=
WEIGHTS_DIR ?=
RUNS_DIR ?=
CACHE_DIR ?=
# Files written to host folders belong to whoever runs make: yolo takes the caller's uid/gid when a
# host folder is given, or `make export` writes beside host weights (not root's: uid 0 is refused,
# so root gets the image's 1000 unless RIG_UID says).
host_id = $(if $(DATASETS_DIR)$(WEIGHTS_DIR)$(RUNS_DIR)$(CACHE_DIR)$(if $(WEIGHTS),$(wildcard $(WEIGHTS))),$(filter-out 0,$(shell id -$(1))))
RIG_UID ?= $(call host_id,u)
RIG_GID ?= $(if $(RIG_UID),$(or $(call host_id,g),$(RIG_UID)))
# NETWORK=host: `make weights`/`make datasets` on the host's network (a mirror on the host's loopback).
NETWORK ?=
FOLDERS := DATASETS_DIR WEIGHTS_DIR RUNS_DIR CACHE_DIR
compose_env = IMAGE=$(REF) STACK=$(STACK) PULL_POLICY=$(PULL_POLICY) \
	$(foreach v,RIG_UID RIG_GID,$(if $($(v)),$(v)=$($(v)))) \
	$(foreach v,$(FOLDERS) CA_BUNDLE,$(if $($(v)),$(v)=$(abspath $($(v)))))
compose_for = $(compose_env) docker compose $(if $(wildcard $(ENV_FILE)),--env-file $(ENV_FILE)) -f compose.yaml \
	$(if $(filter yes,$(1)),-f compose.cpu.yaml) $(if $(RUNS_DIR),-f compose.runs.yaml)
COMPOSE = $(call compose_for,$(CPU_ONLY))
# The export and the demo data run on the CPU: no GPU runtime needed.
COMPOSE_CPU = $(call compose_for,yes)
COMPOSE_FETCH = $(COMPOSE_CPU) $(if $(filter host,$(NETWORK)),-f compose.hostnet.yaml)

# Before any target runs: every variable given on the command line is one this Makefile or compose
# reads (GPU=2 is a typo for GPUS=2, not silently nothing), and a host folder given for a volume
# exists and is readable (Docker would create a missing one, as root).
SETTINGS := $(sort $(shell sed -n 's/^\([A-Z][A-Z0-9_]*\) *?=.*/\1/p' $(firstword $(MAKEFILE_LIST))) \
	$(shell grep -ohE '\$$\{[A-Z][A-Z0-9_]*' compose*.yaml | cut -c3-))
GIVEN = $(foreach v,$(.VARIABLES),$(if $(filter command line,$(origin $(v))),$(v)))
UNKNOWN = $(filter-out $(SETTINGS),$(GIVEN))
hint = $(if $(filter $(1)S,$(SETTINGS)),did you mean $(1)S=$($(1))? )
check_dir = [ -z "$(2)" ] || { [ -d "$(2)" ] && [ -r "$(2)" ] && [ -x "$(2)" ]; } \
	|| { echo "ERROR make: $(1)=$(2) is not a readable folder on this host; create it or fix the path"; exit 2; }
.PHONY: settings
settings:
	@$(foreach v,$(firstword $(UNKNOWN)),echo "ERROR make: $(v)=$($(v)) is not a setting of this Makefile or compose.yaml; $(call hint,$(v))docs/reference.md lists them"; exit 2;)
	@$(foreach v,$(FOLDERS),$(call check_dir,$(v),$($(v))) && ) true

# The image, when it is missing: built from this checkout (a local name), or pulled (a published
# one, never built). It must be of STACK: each stack has its own home, ~/.local and caches.
.PHONY: image
image: $(if $(and $(PUBLISHED),$(TRUSTED)),verify)
	@if ! docker image inspect $(REF) >/dev/null 2>&1 || [ "$(PULL_POLICY)" = always ]; then \
		if [ -n "$(PUBLISHED)" ]; then docker pull $(REF) \
			|| { echo "ERROR make: cannot pull $(REF); check the name, the registry and docker login"; exit 2; }; \
		else $(MAKE) --no-print-directory build; fi; \
	fi
	@stack=$$(docker image inspect -f '{{index .Config.Labels "io.yolo-rig.stack"}}' $(REF)); [ "$$stack" = "$(STACK)" ] \
		|| { echo "ERROR make: $(REF) is of stack $$stack, not STACK=$(STACK); add STACK=$$stack"; exit 2; }

# A published image is run only as its signer signed it: pinned by digest (a tag can move between
# this check and the pull), its signature verified against the key or identity given.
.PHONY: verify
verify: ## IMAGE=NAME@sha256:... COSIGN_PUBLIC_KEY=cosign.pub (or COSIGN_IDENTITY=...): check the image's signature (make up and make train do it first)
	@$(if $(TRUSTED),,echo "ERROR make: give COSIGN_PUBLIC_KEY=cosign.pub (or COSIGN_IDENTITY=... for keyless signatures) to verify $(REF) against"; exit 2)
	@$(if $(findstring @sha256:,$(REF)),,echo "ERROR make: $(REF) is a tag, which can move after it is verified; pin it by digest to verify it: IMAGE=NAME@sha256:... (make push prints it)"; exit 2)
	@command -v cosign >/dev/null || { echo "ERROR make: verifying $(REF) needs cosign on this host (Debian trixie's package, sigstore's release)"; exit 2; }
	@out=$$(cosign verify $(VERIFY_FLAGS) $(REF) 2>&1 >/dev/null) \
		&& echo "INFO make: $(REF) is signed by $(or $(COSIGN_PUBLIC_KEY),$(COSIGN_IDENTITY))" \
		|| { echo "ERROR make: $(REF) is not signed by $(or $(COSIGN_PUBLIC_KEY),$(COSIGN_IDENTITY)) (unsigned, altered or another signer's); cosign: $$(printf '%s\n' "$$out" | grep -v '^WARNING' | tail -n 1)"; exit 2; }

# Kept in $(ENV_FILE) (Compose's .env, which plain `docker compose` reads too): the folder settings
# and RIG_UID/RIG_GID, so the next `make train` uses the folders this `make up` was given. Other
# lines of the file stay; a setting given empty (RUNS_DIR=) is dropped.
save_line = $(if $($(1)),$(1)=$(if $(filter $(FOLDERS),$(1)),$(abspath $($(1))),$($(1))))
.PHONY: save-settings
save-settings:
	@new=$$({ grep -v -E '^($(subst $(space),|,$(SAVED)))=' $(ENV_FILE) 2>/dev/null; \
		printf '%s\n' $(foreach v,$(SAVED),$(if $($(v)),'$(call save_line,$(v))')); } | sed '/^$$/d'); \
	if [ "$$new" != "$$(cat $(ENV_FILE) 2>/dev/null)" ]; then \
		printf '%s\n' "$$new" >$(ENV_FILE) && echo "INFO make: saved in $(ENV_FILE) for the next make and docker compose calls:" \
			$(foreach v,$(SAVED),$(if $($(v)),'$(call save_line,$(v))')) "(a setting given empty, e.g. RUNS_DIR=, drops it)"; \
	fi

# The URLs come from the file `rig serve` writes for this (root's), not from the log, which carries
# whatever a kernel prints too.
.PHONY: up
up: settings $(if $(PUBLISHED),image,build) save-settings ## build (a published IMAGE: pull) if needed, then start the workstation (SSH 2222, JupyterLab 8888), e.g. SSH_PUBLIC_KEY="..." make up
	$(COMPOSE) up -d --wait
	@docker image inspect -f '$(IMAGE_LINE)' $(REF)
	@$(COMPOSE) exec -T workstation cat /run/rig/urls
	@echo "INFO metrics: http://$$($(COMPOSE) port workstation 9464)/metrics while \`rig train\` runs in this workstation (Prometheus text; this host only)"
	@echo "Next: \`make demo-data\` then \`make train\` (a generated dataset), or your own:"
	@echo "  \`make train DATA=path/to/data.yaml MODEL=yolo11n.pt\` (\`make weights W=yolo11n.pt\` fetches it);"
	@echo "  host folders as the volumes: DATASETS_DIR=... WEIGHTS_DIR=... RUNS_DIR=... make up (docs/data.md)"

.PHONY: down
down: settings ## stop and remove the workstation (the volumes stay; `docker compose down -v` deletes them)
	$(COMPOSE) down

.PHONY: logs
logs: settings ## follow the workstation's log
	$(COMPOSE) logs -f workstation

# WEIGHTS: a host file if one exists at that path (its folder is mounted; the .onnx lands beside it),
# else a path in the workstation, relative to /workspace (e.g. runs/detect/train/weights/best.pt).
WEIGHTS ?=
FORMAT ?= onnx
EXPORT_ARGS ?=
.PHONY: export
export: settings | image ## WEIGHTS=... [FORMAT=onnx]: export (simplified) and check it against PyTorch with onnxruntime
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
# The run's /metrics on this host's loopback (the workstation's own METRICS_PORT may be taken by a
# running `make up`); 0: not published.
TRAIN_METRICS_PORT ?= 9465
host_dir_of = $(abspath $(dir $(1)))
DATA_HOST = $(if $(DATA),$(wildcard $(DATA)))
MODEL_HOST = $(if $(MODEL),$(wildcard $(MODEL)))
TRAIN_MOUNTS = $(if $(DATA_HOST),-v $(call host_dir_of,$(DATA)):/mnt/data:ro \
		-e RIG_DATA_HOST_DIR=$(call host_dir_of,$(DATA))) \
	$(if $(MODEL_HOST),-v $(call host_dir_of,$(MODEL)):/mnt/model:ro)

.PHONY: train
train: settings | image ## [GPUS=N|all|0,2] DATA= MODEL= EPOCHS= IMGSZ= BATCH= TRAIN_ARGS=: train on GPUs (demo data by default)
	@$(if $(filter-out 0,$(TRAIN_METRICS_PORT)),echo "INFO metrics: http://127.0.0.1:$(TRAIN_METRICS_PORT)/metrics while this run trains (Prometheus text; this host only)")
	$(COMPOSE) run --rm --no-deps -e RIG_ARGS_FROM=make $(TRAIN_MOUNTS) \
		$(if $(filter-out 0,$(TRAIN_METRICS_PORT)),-p 127.0.0.1:$(TRAIN_METRICS_PORT):9464) workstation rig train $(if $(GPUS),--gpus $(GPUS)) \
		$(if $(DATA),data=$(if $(DATA_HOST),/mnt/data/$(notdir $(DATA)),$(DATA))) \
		$(if $(MODEL),model=$(if $(MODEL_HOST),/mnt/model/$(notdir $(MODEL)),$(MODEL))) \
		$(if $(EPOCHS),epochs=$(EPOCHS)) $(if $(IMGSZ),imgsz=$(IMGSZ)) $(if $(BATCH),batch=$(BATCH)) $(TRAIN_ARGS)

# `make weights` / `make datasets`: the one step that downloads (training stays offline), from
# Ultralytics' GitHub release or RIG_ASSETS_URL (a mirror), checked, into /weights or /datasets.
W ?=
D ?=
RIG_ASSETS_URL ?=
.PHONY: weights
weights: settings | image ## W="yolo11n.pt yolo11s.pt[@sha256:HEX]" [RIG_ASSETS_URL=mirror]: download weights into /weights
	@[ -n "$(W)" ] || { echo "ERROR make: give W=yolo11n.pt (one or more, space-separated)"; exit 2; }
	RIG_ASSETS_URL=$(RIG_ASSETS_URL) $(COMPOSE_FETCH) run --rm --no-deps workstation rig weights get $(W)

.PHONY: datasets
datasets: settings | image ## D="coco8.yaml coco128.yaml" [RIG_ASSETS_URL=mirror]: download Ultralytics' named datasets into /datasets
	@[ -n "$(D)" ] || { echo "ERROR make: give D=coco8.yaml (one or more, space-separated)"; exit 2; }
	RIG_ASSETS_URL=$(RIG_ASSETS_URL) $(COMPOSE_FETCH) run --rm --no-deps workstation rig datasets get $(D)

# `make demo-data`: the generated shapes dataset in the `datasets` volume, where `make train` looks.
DEMO_ARGS ?=
.PHONY: demo-data
demo-data: settings | image ## [DEMO_ARGS="--train 256 --imgsz 640 --seed 1 --force"]: generate /datasets/demo
	$(COMPOSE_CPU) run --rm --no-deps workstation rig demo-data /datasets/demo $(DEMO_ARGS)

# `make bench`: the table on the terminal, the JSON in $(BENCH_JSON). On the GPUs when Docker has them.
BENCH_ARGS ?=
BENCH_JSON ?= bench.json
.PHONY: bench
bench: settings | image ## [BENCH_ARGS="--quick --no-amp --compile --imgsz 640 --batch 16 --workers 8 --data Y"]: loader vs step
	$(COMPOSE) run --rm --no-deps -T workstation rig bench --json - $(BENCH_ARGS) > $(BENCH_JSON)

# `make bench-cli`: `rig --version`, `--help` and the healthcheck's start-up against a bare Python,
# inside the image (tools/measure_cli.py on its stdin, stdlib only).
.PHONY: bench-cli
bench-cli: | image ## start-up of `rig --version`/`--help`/`health` against `python -c pass`, in the image (20 runs each)
	docker run --rm -i --entrypoint /opt/venv/bin/python $(REF) - --runs 20 < tools/measure_cli.py

# The GPU check for a lent GPU box (tools/gpu_check.sh, docs/architecture.md): the wheels the box lacks,
# derived from what the check imports and uv.lock's versions; and the same call rehearsed here on the CPU.
.PHONY: gpu-wheels
gpu-wheels: venv ## the wheels a lent GPU box lacks for tools/gpu_check.sh (rig's imports, uv.lock's versions), Python 3.12, into .whl/
	$(VENV)/bin/python tools/gpu_wheels.py --dest .whl --python-version 3.12

.PHONY: gpu-rehearsal
gpu-rehearsal: venv | image ## tools/gpu_check.sh on the CPU in a container of the image that is the GPU box less its GPU (make test runs it)
	IMAGE=$(REF) PYTHONPATH=entrypoint $(VENV)/bin/pytest tests/image/test_gpu_rehearsal.py $(PYTEST_ARGS)

# The local Slurm cluster (docker/cluster/): a controller and two compute nodes from a test layer on
# the image, compose project $(CLUSTER_PROJECT); the tests marked `cluster` run against it.
CLUSTER_IMAGE ?= $(REF)-slurm
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
	DOCKER_BUILDKIT=1 docker build --build-arg IMAGE=$(REF) --build-arg APT_MIRROR=$(APT_MIRROR) \
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
		&& CLUSTER_IMAGE=$(CLUSTER_IMAGE) CLUSTER_PROJECT=$(CLUSTER_PROJECT) IMAGE=$(REF) PYTHONPATH=entrypoint \
			CLUSTER_USER=$(CLUSTER_USER) $(VENV)/bin/pytest -m cluster tests/cluster $(PYTEST_ARGS) || rc=$$?; \
	$(MAKE) --no-print-directory cluster-down; exit $$rc
