"""The production image cannot be built here: lint it, and hold its steps to CI's commands."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kyc.cli import build_parser
from kyc_testing import PROJECT_ROOT

DOCKERFILE = PROJECT_ROOT / "Dockerfile"


def instructions(keyword: str) -> list[str]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    return [line.split(None, 1)[1] for line in text.splitlines()
            if line.strip().upper().startswith(keyword + " ")]


def exec_form(value: str) -> list[str]:
    return [part.strip().strip('"') for part in value.strip()[1:-1].split(",")]


def test_hadolint_finds_nothing():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    result = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_final_stage_is_the_ngc_triton_2_51_image():
    assert "ARG TRITON_IMAGE=nvcr.io/nvidia/tritonserver:24.10-py3" in DOCKERFILE.read_text()
    stages = instructions("FROM")
    assert len(stages) == 2
    assert stages[-1].strip() == "${TRITON_IMAGE}"


def test_build_stage_makes_the_models_with_make_setup_and_checks_them_with_kyc():
    runs = " && ".join(instructions("RUN"))
    assert "make setup" in runs
    assert ".venv/bin/kyc repo check model_repository" in runs
    makefile = (PROJECT_ROOT / "Makefile").read_text()
    assert re.search(r"^setup:", makefile, re.M)
    assert re.search(r"^test: setup", makefile, re.M)


def test_ci_runs_make_test():
    assert "make test" in (PROJECT_ROOT / ".ci" / "run").read_text()


def test_entrypoint_is_kyc_serve_on_the_system_triton_and_parses():
    (entry,) = instructions("ENTRYPOINT")
    argv = exec_form(entry)
    assert argv[:2] == ["kyc", "serve"]
    args = build_parser().parse_args(argv[1:])
    assert str(args.triton_home) == "/opt/tritonserver"
    assert str(args.model_repository) == "/models"
    assert args.production, "the image serves in production mode (keys required)"


def test_final_stage_installs_its_dependencies_from_the_hash_lock_of_python_3_10():
    final = DOCKERFILE.read_text().split("FROM ${TRITON_IMAGE}\n", 1)[1]
    assert "COPY locks/runtime-py3.10.lock" in final
    assert "--require-hashes -r /tmp/runtime.lock" in final
    assert "--no-deps /tmp/dist/*.whl" in final


def test_healthcheck_asks_kyc_health_for_readiness():
    (health,) = instructions("HEALTHCHECK")
    argv = exec_form(health.split("CMD", 1)[1])
    assert argv[:2] == ["kyc", "health"]
    assert build_parser().parse_args(argv[1:]).func.__name__ == "cmd_health"


def test_image_runs_as_a_non_root_user():
    (user,) = instructions("USER")
    assert user.split(":")[0] not in ("0", "root")


@pytest.mark.parametrize("port", ["8000", "8001", "8002"])
def test_image_exposes_the_contract_ports(port):
    (expose,) = instructions("EXPOSE")
    assert port in shlex.split(expose)
