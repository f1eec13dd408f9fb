# make setup | make serve | make test -- see README.md
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
REPOSITORY ?= model_repository
PYTEST_ARGS ?=

.PHONY: setup deps models serve test lint unit integration check clean lock runtime deps-locked bench-tools perf-analyzer model-analyzer mutate \
	wheelhouse image image-cpu image-base-cpu

## setup: idempotent; .venv, Debian packages, the project, default model weights
setup: deps models

deps: $(VENV)/.installed

PYVER := $(shell $(PYTHON) -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
PIP := $(BIN)/python -m pip install -q --disable-pip-version-check

# A virtual environment with pip at $(1): venv where the Python has ensurepip, else
# virtualenv (NGC's image, the image build stage: no python3-venv, virtualenv installed).
define make_venv
$(1)/bin/python -m pip --version >/dev/null 2>&1 \
	|| { $(PYTHON) -c 'import ensurepip' 2>/dev/null && $(PYTHON) -m venv --clear $(1); } \
	|| $(PYTHON) -m virtualenv -q --clear $(1)
endef

# Every dependency comes from locks/ (exact versions and sha256 hashes; `make lock`
# regenerates them); the project itself is installed without dependencies.
# The project builds without build isolation, with setuptools and wheel from locks/build.lock:
# nothing is fetched unhashed, and the image build (no network) installs it the same way.
# The locked dependencies have a stamp of their own, so that the image's build stage can
# install them in a layer that a change to the project's code does not invalidate.
$(VENV)/.installed-locks: constraints.txt locks/dev-py$(PYVER).lock locks/triton.lock locks/build.lock scripts/system-deps.sh
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python >= 3.10 is required")'
	@test -f locks/dev-py$(PYVER).lock || { echo "no lock for Python $(PYVER) in locks/" >&2; exit 1; }
	bash scripts/system-deps.sh $(PYVER)
	$(call make_venv,$(VENV))
	$(PIP) --require-hashes -r locks/dev-py$(PYVER).lock -r locks/build.lock
	@# The wheel's own Python dependencies are not needed to run its server binary.
	$(PIP) --no-deps --require-hashes -r locks/triton.lock
	touch $@

# Two distributions: the client's (client/, kyc_client) and the server's, which builds on it.
$(VENV)/.installed: $(VENV)/.installed-locks pyproject.toml client/pyproject.toml
	$(PIP) --no-deps --no-build-isolation -e ./client -e .
	touch $@

## lock: regenerate locks/ after a change to pyproject.toml or constraints.txt
lock:
	bash scripts/lock.sh

# PyTorch for `kyc models arcface` and its tests; not part of setup (the image has no torch).
$(VENV)/.installed-arcface: $(VENV)/.installed
	@# torch (pinned in pyproject's arcface extra) is not in locks/: pip takes the CPU
	@# build from the machine's local wheels; everything else is already installed.
	$(PIP) -c constraints.txt -e '.[dev,bench,arcface]'
	touch $@

# The OCR peer `kyc bench` compares document reading with; not part of setup.
# --no-deps: it requires opencv-python, which clashes with opencv-python-headless
# (same cv2 module, already installed); locks/peers.lock lists its other requirements.
$(VENV)/.installed-peers: $(VENV)/.installed locks/peers.lock
	$(PIP) --no-deps --require-hashes -r locks/peers.lock
	$(BIN)/python -c 'import rapidocr_onnxruntime, dlib'
	touch $@

## bench-tools: the instruments of `kyc bench`: perf_analyzer and the OCR peer (RapidOCR)
bench-tools: perf-analyzer $(VENV)/.installed-peers

## perf-analyzer: NVIDIA's perf_analyzer 2.51.0 (the server's release) as .venv/bin/perf_analyzer,
## the load generator of `kyc bench` (scripts/perf-analyzer.sh; make test installs it)
perf-analyzer: $(VENV)/.installed-perf-analyzer

$(VENV)/.installed-perf-analyzer: $(VENV)/.installed locks/perf-analyzer.lock scripts/perf-analyzer.sh
	bash scripts/perf-analyzer.sh $(VENV)
	touch $@

## model-analyzer: NVIDIA's Model Analyzer 1.58.0 in its own venv, as .venv/bin/model-analyzer,
## for `kyc tune` (scripts/model-analyzer.sh; make test installs it)
model-analyzer: $(VENV)/.installed-model-analyzer

$(VENV)/.installed-model-analyzer: $(VENV)/.installed-perf-analyzer scripts/model-analyzer.sh \
	locks/model-analyzer-py$(PYVER).lock
	bash scripts/model-analyzer.sh $(VENV)
	touch $@

## mutate: mutation testing of the decision side (mutmut, locks/mutmut-py3.X.lock; not part
## of make test): custody, the verdict, the policy, the ledger, the seal, the visual zone
## against their unit tests (scripts/mutate.sh; the counts: docs/mutation-testing.md)
mutate: $(VENV)/.installed-mutmut
	bash scripts/mutate.sh $(VENV)

# redis-server for the ledger's tests (system-deps --test; tests/conftest.py starts it).
$(VENV)/.installed-mutmut: $(VENV)/.installed locks/mutmut-py$(PYVER).lock scripts/system-deps.sh
	bash scripts/system-deps.sh $(PYVER) --test
	$(PIP) --require-hashes -r locks/mutmut-py$(PYVER).lock
	touch $@

# deploy/ checks (make test only): Prometheus from Debian; kubectl (kustomize), which is
# no Debian package: the machine image of CI and the developers has it; and the KServe
# SDK wheel, downloaded and never installed (tests/kserve_schema.py reads its API types).
$(VENV)/.installed-deploy: $(VENV)/.installed scripts/system-deps.sh locks/kserve.lock
	bash scripts/system-deps.sh $(PYVER) --test
	@command -v kubectl >/dev/null || { echo "kubectl is needed to render deploy/ (kubectl kustomize)" >&2; exit 1; }
	$(BIN)/python -m pip download -q --disable-pip-version-check --no-deps --require-hashes \
		-r locks/kserve.lock -d $(VENV)/kserve-sdk
	touch $@

## runtime: the image's Python environment at RUNTIME: the runtime lock and the project's
## wheel, no tools (the Dockerfile's build stage runs it; its final stage copies it)
RUNTIME ?= build/runtime
$(RUNTIME)/.installed-locks: locks/runtime-py$(PYVER).lock
	$(call make_venv,$(RUNTIME))
	$(RUNTIME)/bin/python -m pip install -q --disable-pip-version-check \
		--require-hashes -r locks/runtime-py$(PYVER).lock
	touch $@

runtime: deps $(RUNTIME)/.installed-locks
	rm -rf build/dist
	$(BIN)/python -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation \
		-w build/dist ./client .
	$(RUNTIME)/bin/python -m pip install -q --disable-pip-version-check --no-deps \
		--force-reinstall build/dist/*.whl

## deps-locked: the locked dependencies of both environments, not the project (the image
## installs them in a layer of their own)
deps-locked: $(VENV)/.installed-locks $(RUNTIME)/.installed-locks

models: deps
	$(BIN)/kyc models fetch --repository $(REPOSITORY)
	$(BIN)/kyc models antifraud install --repository $(REPOSITORY)
	$(BIN)/kyc models mrz-rec check --repository $(REPOSITORY)

## serve: a real Triton server (CPU) on HTTP 8000, gRPC 8001, metrics 8002
serve: setup
	$(BIN)/kyc serve --model-repository $(REPOSITORY)

check: setup
	$(BIN)/kyc repo check $(REPOSITORY)

lint: deps
	$(BIN)/ruff check .
	$(BIN)/hadolint Dockerfile docker/base-cpu/Dockerfile

## test: lint, unit tests, integration tests against a real server and the real image
## (kyc-triton:cpu in a Docker engine that make image-cpu starts and this stops)
test: setup lint $(VENV)/.installed-arcface $(VENV)/.installed-peers $(VENV)/.installed-deploy \
	$(VENV)/.installed-perf-analyzer $(VENV)/.installed-model-analyzer image-cpu
	KYC_IMAGE_TESTS=required $(BIN)/python -m pytest $(PYTEST_ARGS) \
		|| { status=$$?; bash scripts/docker-engine.sh stop; exit $$status; }
	bash scripts/docker-engine.sh stop

# -- the production image ----------------------------------------------------------
# Built with Docker's classic builder and --network none: the build reaches no network;
# the host prepares everything it installs (make wheelhouse). See docs/image.md.
TRITON_IMAGE ?= nvcr.io/nvidia/tritonserver:24.10-py3
CPU_BASE ?= kyc-triton-base:cpu
WHEELHOUSE ?= build/wheelhouse
DOCKER_BUILD := DOCKER_BUILDKIT=0 docker build --network none
# The Python of each base: NGC 24.10 (Ubuntu 22.04) 3.10; the CPU stand-in (Debian 12) 3.11.
NGC_PYTHON := 3.10
CPU_BASE_PYTHON := 3.11
IMAGE_PYTHON ?= $(NGC_PYTHON)

## wheelhouse: what the image build installs, fetched and checked on the host: the
## hash-locked wheels for IMAGE_PYTHON, the pinned weight archives, the .debs it lacks
wheelhouse: deps
	bash scripts/wheelhouse.sh $(IMAGE_PYTHON) $(WHEELHOUSE)

## image: kyc-triton:latest on NGC's Triton 24.10 (a GPU host with Docker and nvcr.io)
image: deps
	bash scripts/docker-engine.sh start
	bash scripts/wheelhouse.sh $(NGC_PYTHON) $(WHEELHOUSE)
	$(DOCKER_BUILD) --build-arg TRITON_IMAGE=$(TRITON_IMAGE) -t kyc-triton:latest .

## image-base-cpu: the CPU stand-in for NGC's image, from Debian's packages and the
## nvidia-pytriton wheel (rebuilt only when its inputs change)
image-base-cpu: deps
	bash scripts/docker-engine.sh start
	bash scripts/image-base-cpu.sh $(CPU_BASE) $(CPU_BASE_PYTHON)

## image-cpu: kyc-triton:cpu, the same Dockerfile on the CPU stand-in base
image-cpu: image-base-cpu
	bash scripts/wheelhouse.sh $(CPU_BASE_PYTHON) $(WHEELHOUSE)
	$(DOCKER_BUILD) --build-arg TRITON_IMAGE=$(CPU_BASE) -t kyc-triton:cpu .

unit: deps $(VENV)/.installed-arcface $(VENV)/.installed-deploy
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

integration: setup $(VENV)/.installed-arcface $(VENV)/.installed-peers $(VENV)/.installed-deploy \
	$(VENV)/.installed-perf-analyzer $(VENV)/.installed-model-analyzer
	$(BIN)/python -m pytest tests/integration $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
