"""The Dockerfile, statically: lint, and its steps held to CI's commands. The image itself is
built and run on the CPU stand-in base by tests/integration/test_image.py."""

from __future__ import annotations

import ast
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kyc_testing import PROJECT_ROOT
from kyc_tools.cli import build_parser, entrypoint_http_url

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


def test_the_build_installs_from_the_hosts_wheelhouse_and_never_from_an_index():
    text = DOCKERFILE.read_text()
    env = " ".join(instructions("ENV"))
    assert "PIP_NO_INDEX=1" in env
    assert "PIP_FIND_LINKS=/src/build/wheelhouse/wheels" in env
    assert "KYC_CACHE_DIR=/src/build/wheelhouse/weights" in env
    assert "KYC_DEBS_DIR=/src/build/wheelhouse/debs" in env
    runs = " ".join(instructions("RUN"))
    assert "apt-get" not in runs and "curl" not in runs and "wget" not in runs
    for insecure in ("--trusted-host", "--no-check-certificate", "verify=False", "-k "):
        assert insecure not in text
    makefile = (PROJECT_ROOT / "Makefile").read_text()
    assert "docker build --network none" in makefile


def test_dependencies_are_installed_before_the_projects_code_is_copied():
    """A change to the code alone must rebuild from the cached dependency layers."""
    lines = [line.strip() for line in DOCKERFILE.read_text().replace("\\\n", " ").splitlines()]
    deps = next(i for i, line in enumerate(lines) if "make deps-locked" in line)
    for source in ("backends/", "export/", "model_repository/"):
        copy = next(i for i, line in enumerate(lines) if line.startswith(f"COPY {source}"))
        assert deps < copy, f"{source} is copied before the dependencies are installed"
    assert not any(re.match(r"COPY \. ", line) for line in lines), "COPY . invalidates every layer"


def test_every_locked_install_of_the_makefile_requires_hashes():
    makefile = (PROJECT_ROOT / "Makefile").read_text().replace("\\\n", " ")
    for line in makefile.splitlines():
        if re.search(r"pip install.* -r locks/", line) or re.search(r"\$\(PIP\).* -r locks/", line):
            assert "--require-hashes" in line, line
    assert "--no-build-isolation -e ." in makefile, "the project builds with the locked setuptools"


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


def test_the_image_listens_on_every_interface_by_saying_so():
    """kyc serve's default is loopback only; a container is reached from outside it."""
    (entry,) = instructions("ENTRYPOINT")
    argv = exec_form(entry)
    assert argv[argv.index("--host") + 1] == "0.0.0.0"
    assert build_parser().parse_args(argv[1:]).address == "0.0.0.0"
    assert build_parser().parse_args(["serve"]).address == "127.0.0.1"


def test_the_models_in_the_image_are_roots_and_read_only_to_the_serving_user():
    final = DOCKERFILE.read_text().split("FROM ${TRITON_IMAGE}\n", 1)[1]
    (copy,) = [line for line in final.splitlines() if line.rstrip().endswith(" /models")]
    assert copy.split()[:2] == ["COPY", "--from=build"] and "--chown" not in copy
    assert "chmod -R u=rwX,go=rX model_repository" in " ".join(instructions("RUN"))
    assert "chown" not in " ".join(line for line in final.splitlines()
                                   if not line.lstrip().startswith("#"))


def test_final_stage_takes_the_runtime_environment_that_make_runtime_built():
    final = DOCKERFILE.read_text().split("FROM ${TRITON_IMAGE}\n", 1)[1]
    assert "COPY --from=build /opt/kyc /opt/kyc" in final
    assert "PATH=/opt/kyc/bin:${PATH}" in final
    assert "make runtime RUNTIME=/opt/kyc" in " ".join(instructions("RUN"))
    makefile = (PROJECT_ROOT / "Makefile").read_text().replace("\\\n", " ")
    assert "--require-hashes -r locks/runtime-py$(PYVER).lock" in makefile


def test_healthcheck_asks_kyc_health_for_readiness():
    (health,) = instructions("HEALTHCHECK")
    argv = exec_form(health.split("CMD", 1)[1])
    assert argv[:2] == ["kyc", "health"]
    args = build_parser().parse_args(argv[1:])
    assert args.func.__name__ == "cmd_health"
    assert args.url is None, "a fixed --url would miss a port given after the image name"


def test_image_runs_as_a_non_root_user():
    (user,) = instructions("USER")
    assert user.split(":")[0] not in ("0", "root")


@pytest.mark.parametrize("port", ["8000", "8001", "8002", "8003"])
def test_image_exposes_the_contract_ports(port):
    (expose,) = instructions("EXPOSE")
    assert port in shlex.split(expose)


def _cmdline(tmp_path: Path, *argv: str) -> Path:
    path = tmp_path / "cmdline"
    path.write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    return path


def test_kyc_health_follows_the_http_port_given_after_the_image_name(tmp_path):
    (entry,) = instructions("ENTRYPOINT")
    argv = ["/opt/kyc/bin/python3", "/opt/kyc/bin/kyc", *exec_form(entry)[1:],
            "--http-port", "9123"]

    assert entrypoint_http_url(_cmdline(tmp_path, *argv)) == "127.0.0.1:9123"


def test_kyc_health_uses_the_entrypoints_address_when_it_is_not_every_interface(tmp_path):
    path = _cmdline(tmp_path, "/usr/bin/python3", "/usr/local/bin/kyc", "serve",
                    "--address", "127.0.0.2")

    assert entrypoint_http_url(path) == "127.0.0.2:8000"


@pytest.mark.parametrize("argv", [("/sbin/init",), ("/x/kyc", "verify"),
                                  ("/x/kyc", "serve", "--http-port", "not-a-port")])
def test_kyc_health_falls_back_when_pid_1_is_not_a_kyc_serve_it_can_read(tmp_path, argv):
    assert entrypoint_http_url(_cmdline(tmp_path, *argv)) is None
    assert entrypoint_http_url(tmp_path / "absent") is None


def test_the_docs_cpu_run_line_is_the_one_the_image_tests_run():
    """tests/integration/test_image.py runs the container with these very options; the
    CPU run line lives in docs/image.md, which the README links to."""
    page = (PROJECT_ROOT / "docs" / "image.md").read_text()
    block = page.split("make image-cpu  #", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    run = shlex.split(next(line for line in block.splitlines() if "docker run" in line))
    assert run[:2] == ["docker", "run"]
    assert {"--network", "host", "--shm-size=2g", "kyc-triton:cpu"} <= set(run)
    assert [run[i + 1].split("=")[0] for i, a in enumerate(run) if a == "-e"] == [
        "KYC_ADMIN_KEY", "KYC_TOKEN_KEY", "KYC_CLIENT_KEY"]
    tests = (PROJECT_ROOT / "tests" / "integration" / "test_image.py").read_text()
    for option in ('"--network", "host", "--shm-size=2g"', '"-e", f"KYC_ADMIN_KEY=',
                   '"-e", f"KYC_TOKEN_KEY=', '"-e", f"KYC_CLIENT_KEY=', "--http-port",
                   "--grpc-port", "--metrics-port", '"--host", options.address'):
        assert option in tests, option
    # the host's network: only loopback, as on_free_ports gives the tests
    assert run[run.index("--host") + 1] == "127.0.0.1"


def test_the_readmes_production_run_publishes_on_loopback_hardened_as_the_image_tests():
    readme = (PROJECT_ROOT / "README.md").read_text()
    block = readme.split("### 1. One image:", 1)[1].split("```", 2)[1].replace("\\\n", " ")
    run = shlex.split(next(line for line in block.splitlines() if "docker run" in line))
    assert run[run.index("-p") + 1] == "127.0.0.1:8000-8003:8000-8003"
    # every key production requires (the client key from the line before, as clients read it)
    assert [run[i + 1].split("=")[0] for i, a in enumerate(run) if a == "-e"] == [
        "KYC_ADMIN_KEY", "KYC_TOKEN_KEY", "KYC_CLIENT_KEY"]
    assert 'export KYC_CLIENT_KEY="$(openssl rand -hex 24)"' in block
    tests = (PROJECT_ROOT / "tests" / "integration" / "test_image.py").read_text()
    flags = list(ast.literal_eval(re.search(r"^HARDENED = (\(.*?\))$", tests, re.M | re.S)[1]))
    assert " ".join(flags) in " ".join(run), "README runs the image as test_image.py does"
    assert {"--read-only", "ALL", "no-new-privileges", "1000:1000"} <= set(flags)
