# make setup | make serve | make test -- see README.md
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
REPOSITORY ?= model_repository
PYTEST_ARGS ?=

.PHONY: setup deps models serve test lint unit integration check clean

## setup: idempotent; .venv, Debian packages, the project, default model weights
setup: deps models

deps: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt scripts/system-deps.sh
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python >= 3.10 is required")'
	bash scripts/system-deps.sh "$$($(PYTHON) -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[dev,bench]'
	@# The wheel's own Python dependencies are not needed to run its server binary.
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps -c constraints.txt nvidia-pytriton
	touch $@

# PyTorch for `kyc models arcface` and its tests; not part of setup (the image has no torch).
$(VENV)/.installed-arcface: $(VENV)/.installed
	$(BIN)/python -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[dev,bench,arcface]'
	touch $@

# The OCR peer `kyc bench` compares document reading with; not part of setup.
# --no-deps: it requires opencv-python, which clashes with opencv-python-headless
# (same cv2 module, already installed); its other requirements are listed here.
PEERS := rapidocr-onnxruntime shapely PyYAML six tqdm
$(VENV)/.installed-peers: $(VENV)/.installed constraints.txt
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps -c constraints.txt $(PEERS)
	$(BIN)/python -c 'import rapidocr_onnxruntime'
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
test: setup lint $(VENV)/.installed-arcface $(VENV)/.installed-peers
	$(BIN)/python -m pytest $(PYTEST_ARGS)

unit: deps $(VENV)/.installed-arcface
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

integration: setup $(VENV)/.installed-arcface $(VENV)/.installed-peers
	$(BIN)/python -m pytest tests/integration $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
