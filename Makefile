# rltrainer developer commands. Every target that needs the environment installs it first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint bench clean crds images base-image e2e system-deps docs parts kuberay coredns seaweedfs kueue kwok

install: $(STAMP)

# uv (pinned) installs the packages: from its cache (~/.cache/uv) a new clone's 5 GB of packages
# are hard links made in seconds, where pip unpacked every wheel again (3.5 minutes on 2 cores).
# It is given pip's settings where they are set in the environment (a local wheel folder, a CA
# bundle), as it does not read pip's.
UV_VERSION := 0.13.9
UV_INSTALL = $(if $(PIP_CERT),SSL_CERT_FILE=$(PIP_CERT)) $(BIN)/uv pip install --python $(BIN)/python \
	$(if $(PIP_FIND_LINKS),--find-links $(PIP_FIND_LINKS))

# Both installs compile what they install to bytecode (--compile-bytecode: ~27,000 modules, about
# a minute on 2 cores), as pip does and uv does not by default: where PYTHONDONTWRITEBYTECODE is
# set (CI, containers) nothing else ever writes the .pyc files, so each process compiled what it
# imported again: `import torch` took 4.4 CPU-s instead of 2.1, paid by every Ray actor, CLI run
# and test process.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q uv==$(UV_VERSION)
	# The pinned torch first (PyPI's build, with its CUDA libraries; it runs on the CPU).
	$(UV_INSTALL) --compile-bytecode torch==2.13.0
	$(UV_INSTALL) --compile-bytecode -e ".[dev]"
	touch $(STAMP)

# Debian packages the suite needs beyond Python (tests/system-packages.txt): installed with apt-get
# when missing and this runs as root (CI, a fresh machine); otherwise named, and the tests that need
# them skip saying so.
SYSTEM_PACKAGES := $(shell sed -e 's/\#.*//' tests/system-packages.txt)
system-deps:
	@missing=$$(for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian packages: $$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	else \
		echo "missing Debian packages (tests that need them skip): $$missing"; \
	fi

# The platform's real components beside the control plane, each built from its Go module at the
# version operator/rltrainer_operator/testing/parts.toml pins (module hash and build info checked)
# into ~/.cache/rltrainer-parts: KubeRay's operator, CoreDNS (the nodes' cluster DNS), SeaweedFS
# (the S3 server, ~10 minutes cold, 233 MB), Kueue (the shared clusters' queues) and KWOK (nodes
# without kubelets, for the scale check and bench.operator_scale). A cold build takes minutes on 2
# cores, a built one is re-checked in about a second. `make parts` without `go` says so and
# succeeds (the tests that need them skip, saying why).
PARTS := $(PYTHON) operator/rltrainer_operator/testing/parts.py
parts:
	$(PARTS) build --if-go kuberay coredns seaweedfs kueue kwok
kuberay:
	$(PARTS) build kuberay
coredns:
	$(PARTS) build coredns
seaweedfs:
	$(PARTS) build seaweedfs
kueue:
	$(PARTS) build kueue
kwok:
	$(PARTS) build kwok

DEMO_DIR := .demo_results

# Train PPO on CartPole-v1 until solved (tuned example), checkpoint, evaluate the checkpoint.
# Seeded, so every run is the same run (seeds 0-29 all solve and evaluate at 475 or more with the
# deterministic policy: the tuned example's comment).
demo: $(STAMP)
	rm -rf $(DEMO_DIR)
	$(BIN)/rltrainer train file tuned_examples/ppo_cartpole.yaml --checkpoint-at-end \
		--config '{"seed": 0}' --storage-path $(DEMO_DIR) --name demo
	$(BIN)/rltrainer evaluate "$$(ls -d $(DEMO_DIR)/demo/*/checkpoint_* | tail -n 1)" --episodes 20

# Three worker processes on 2 cores, whole files each (module fixtures such as a Ray instance stay
# in one): the worker running tests/node mostly waits on Pods (160 of 700 s on the CPU), and a
# third keeps both cores busy meanwhile (pytest 24.6 min -> 17.4 and 20.3 in two runs).
# Byte-compiled first: pip compiles the dependencies but not this checkout, and where
# PYTHONDONTWRITEBYTECODE is set no process writes the .pyc files, so each of the suite's ~500
# processes (Ray actors, CLI runs) compiled the modules it imports again (~0.2 s each).
test: $(STAMP) system-deps parts
	$(BIN)/python -m compileall -q -j 0 rltrainer operator/rltrainer_operator tests bench
	$(BIN)/python -m pytest -n 3 --dist loadfile --no-loadscope-reorder

# End to end: tests/e2e (the operator, real local Ray clusters played by the process stand-in
# for KubeRay, the real S3 server, the fault matrix) and tests/node (the same journeys on real Pods on two
# real nodes made by KubeRay's own operator, suspend/resume, a sweep, the S3 refusals, a Helm
# release's upgrade, rollback and uninstall, Kueue's queues, preemption, a drain and deleted pods
# there too, and the cluster's own faults). About an hour on 2 cores; `make test` runs the process
# journey shortened (a fixed number of iterations instead of until solved), the node's bad-input
# cases, leader failover and API server restart, Kueue on the simulated cluster, and the fault
# matrix's storage rows (docs/design/testing.md).
# Then the library's tests marked e2e_only: those whose smaller check make test runs instead (the
# documents' command for every algorithm with its defaults, training to a target).
# Both halves run whatever the first one's outcome (make fails if either did), and -rP prints what
# passing tests printed: the fault tests' JSON records (recovery time, iterations lost).
e2e: $(STAMP) system-deps parts
	RLTRAINER_E2E=1 $(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder -rfEP \
		tests/e2e tests/node; platform=$$?; \
	RLTRAINER_E2E=1 $(BIN)/python -m pytest -n 2 --dist loadfile -m e2e_only -rfE tests \
		--ignore=tests/e2e --ignore=tests/node; library=$$?; \
	test $$platform = 0 && test $$library = 0

lint: $(STAMP)
	$(BIN)/ruff check rltrainer operator tests bench
	$(BIN)/ruff format --check rltrainer operator tests bench

# The documentation site (mkdocs.yml) into site/, in strict mode: a broken link or anchor, a page
# missing from the nav or an API reference that does not resolve fails the build. The generated
# parts (RLExperiment reference, migration tables, benchmark tables and plots) come from
# docs/gen/hooks.py. `make test` builds it too (tests/test_docs_site.py).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --clean

# The RLExperiment CRD in crds/, generated from operator/rltrainer_operator/models.py, and the
# Helm chart's copy of it (tests fail when either differs from the models).
crds: $(STAMP)
	$(BIN)/python -m rltrainer_operator.crd
	$(BIN)/python -m rltrainer_operator.crd --output charts/rltrainer-operator/crds/rltrainer.io_rlexperiments.yaml

# Container images (images/*/Dockerfile, built from the repository root) with podman where it is
# installed, else docker. BASE_IMAGE: the Dockerfiles' public python:3.11 slim image, except where
# mmdebstrap is installed and no BASE_IMAGE is given: there a local Debian bookworm base with
# Python 3.11 (`make base-image`, built once and cached by the engine), for machines that reach
# package registries but no image registry. TORCH_WHEELS: a folder holding the torch wheel to
# install (pip's own find-links folder by default, when it has one), mounted into the build.
# REQUESTS_CA_BUNDLE: the CA bundle pip verifies with inside the build (pip's cert setting, when
# it has one). TORCH_CPU_INDEX: where the cpu variant's torch comes from when no local wheel is
# given: torch's CPU index where it is reachable (TORCH_CPU_INDEX="--index-url URL"), else empty,
# the configured index (PyPI): its torch is the CUDA build, ~4.7 GB more in the image, and runs
# on the CPU as well. Machines that reach only package registries need the empty default.
TORCH_CPU_INDEX ?=
IMAGE_REGISTRY ?= ghcr.io/rltrainer
IMAGE_VERSION ?= $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
TORCH_VERSION := $(shell sed -n 's/.*pip install torch==\([0-9.]*\).*/\1/p' Makefile | head -n 1)
CONTAINER_ENGINE ?= $(if $(shell command -v podman),podman,docker)
LOCAL_BASE_IMAGE := localhost/rltrainer-base:bookworm
BASE_IMAGE ?= $(if $(shell command -v mmdebstrap),$(LOCAL_BASE_IMAGE))
TRAINER_VARIANTS ?= cpu
# pip's own settings, from its environment variables or its configuration files.
PIP_SETTING = $(or $(1),$(shell $(PYTHON) -m pip config get global.$(2) 2>/dev/null))
TORCH_WHEELS ?= $(call PIP_SETTING,$(PIP_FIND_LINKS),find-links)
REQUESTS_CA_BUNDLE ?= $(call PIP_SETTING,$(PIP_CERT),cert)
# podman here: runc, and no ulimits raised (this kind of machine refuses them; images/containers.conf).
export CONTAINERS_CONF ?= $(CURDIR)/images/containers.conf
# Build-time mounts (-v) are podman's; with docker, pip downloads torch and verifies with its own CAs.
PODMAN := $(filter podman,$(notdir $(CONTAINER_ENGINE)))
TORCH_WHEEL := $(firstword $(wildcard $(TORCH_WHEELS)/torch-$(TORCH_VERSION)+cpu-*.whl))
BUILD := $(CONTAINER_ENGINE) build --network host \
	$(if $(BASE_IMAGE),--build-arg BASE_IMAGE=$(BASE_IMAGE)) \
	$(if $(and $(PODMAN),$(REQUESTS_CA_BUNDLE)),-v $(REQUESTS_CA_BUNDLE):/run/pip-ca.crt:ro --build-arg REQUESTS_CA_BUNDLE=/run/pip-ca.crt) \
	--build-arg VERSION=$(IMAGE_VERSION)

images: $(if $(filter $(LOCAL_BASE_IMAGE),$(BASE_IMAGE)),base-image)
	$(BUILD) -f images/operator/Dockerfile -t $(IMAGE_REGISTRY)/operator:$(IMAGE_VERSION) .
	$(foreach variant,$(TRAINER_VARIANTS),$(BUILD) -f images/trainer/Dockerfile --build-arg VARIANT=$(variant) \
		$(if $(and $(PODMAN),$(TORCH_WHEEL),$(filter cpu,$(variant))),-v $(dir $(TORCH_WHEEL)):/wheels:ro --build-arg TORCH_PIP_ARGS=--find-links=/wheels) \
		--build-arg TORCH_CPU_INDEX="$(TORCH_CPU_INDEX)" \
		-t $(IMAGE_REGISTRY)/trainer:$(IMAGE_VERSION)-$(variant) . &&) true

# The local base: Debian bookworm (minbase) with Python 3.11, venv and CA certificates, made with
# mmdebstrap from this machine's apt sources; built once, then the engine's copy is used.
base-image:
	@$(CONTAINER_ENGINE) image exists $(LOCAL_BASE_IMAGE) 2>/dev/null || { \
		tmp=$$(mktemp -d) && \
		mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates,passwd \
			bookworm $$tmp/base.tar && \
		$(CONTAINER_ENGINE) import -q $$tmp/base.tar $(LOCAL_BASE_IMAGE) && rm -rf $$tmp; }

clean:
	rm -rf $(VENV) build site *.egg-info $(DEMO_DIR)
