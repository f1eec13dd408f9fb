# make setup | make serve | make test -- see README.md
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
REPOSITORY ?= model_repository
PYTEST_ARGS ?=

.PHONY: setup deps models serve test lint unit integration check clean lock

## setup: idempotent; .venv, Debian packages, the project, default model weights
setup: deps models

deps: $(VENV)/.installed

PYVER := $(shell $(PYTHON) -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
PIP := $(BIN)/python -m pip install -q --disable-pip-version-check

# Every dependency comes from locks/ (exact versions and sha256 hashes; `make lock`
# regenerates them); the project itself is installed without dependencies.
$(VENV)/.installed: pyproject.toml constraints.txt locks/dev-py$(PYVER).lock locks/triton.lock scripts/system-deps.sh
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python >= 3.10 is required")'
	@test -f locks/dev-py$(PYVER).lock || { echo "no lock for Python $(PYVER) in locks/" >&2; exit 1; }
	bash scripts/system-deps.sh $(PYVER)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) --require-hashes -r locks/dev-py$(PYVER).lock
	$(PIP) --no-deps -e .
	@# The wheel's own Python dependencies are not needed to run its server binary.
	$(PIP) --no-deps --require-hashes -r locks/triton.lock
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
	$(BIN)/python -c 'import rapidocr_onnxruntime'
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

models: deps
	$(BIN)/kyc models fetch --repository $(REPOSITORY)
	$(BIN)/kyc models antifraud install --repository $(REPOSITORY)

## serve: a real Triton server (CPU) on HTTP 8000, gRPC 8001, metrics 8002
serve: setup
	$(BIN)/kyc serve --model-repository $(REPOSITORY)

check: setup
	$(BIN)/kyc repo check $(REPOSITORY)

lint: deps
	$(BIN)/ruff check .
	$(BIN)/hadolint Dockerfile

## test: lint, unit tests, integration tests against a real server
test: setup lint $(VENV)/.installed-arcface $(VENV)/.installed-peers $(VENV)/.installed-deploy
	$(BIN)/python -m pytest $(PYTEST_ARGS)

unit: deps $(VENV)/.installed-arcface $(VENV)/.installed-deploy
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

integration: setup $(VENV)/.installed-arcface $(VENV)/.installed-peers $(VENV)/.installed-deploy
	$(BIN)/python -m pytest tests/integration $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
