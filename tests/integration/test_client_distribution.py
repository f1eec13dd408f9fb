"""The client's distribution (client/) stands alone: built, and installed into a fresh
virtual environment with its locked dependencies, it holds none of the models' runtimes,
and its README's snippet verifies a customer against a real server and checks the
signed verdict."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kyc_client.channel import CLIENT_KEY_ENV
from kyc_testing import KYC, MODEL_RUNTIMES, PROJECT_ROOT, keyed_server

pytestmark = pytest.mark.integration

CLIENT = PROJECT_ROOT / "client"
PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"
# The server's distribution, and what it needs to serve: none is a client's.
NOT_A_CLIENTS = MODEL_RUNTIMES | {"kyc-triton"}


def run(*argv: str | Path, **kwargs) -> str:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                          timeout=600, **kwargs)
    assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def client_python(tmp_path_factory) -> Path:
    """The Python of a fresh virtual environment holding the client's wheel and the
    pins of locks/client-py3.X.lock, and nothing of this project's environment."""
    work = tmp_path_factory.mktemp("client-distribution")
    run(sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps",
        "--no-build-isolation", "-w", work / "dist", CLIENT)
    run(sys.executable, "-m", "venv", work / "venv")
    python = work / "venv" / "bin" / "python"
    pip = (python, "-m", "pip", "install", "-q", "--disable-pip-version-check")
    run(*pip, "--require-hashes", "-r", PROJECT_ROOT / "locks" / f"client-py{PYTHON}.lock")
    run(*pip, "--no-deps", *sorted((work / "dist").glob("*.whl")))
    return python


def test_the_client_installs_with_what_it_declares_and_no_model_runtime(client_python):
    run(client_python, "-m", "pip", "check")  # the lock covers the wheel's requirements
    listed = json.loads(run(client_python, "-m", "pip", "list", "--format", "json"))
    names = {item["name"].lower().replace("_", "-") for item in listed}
    assert "kyc-triton-client" in names and "tritonclient" in names, names
    assert not names & NOT_A_CLIENTS, names & NOT_A_CLIENTS
    # it imports alone: no package of the server's distribution is there to lean on
    run(client_python, "-c", "import kyc_client, kyc_client.sdk, kyc_client.liveness; "
        "import importlib.util as u; assert u.find_spec('kyc') is None")


def readme_snippet() -> str:
    found = re.findall(r"```python\n(.*?)```", (CLIENT / "README.md").read_text(), re.S)
    assert len(found) == 1, "client/README.md shows one python snippet"
    return found[0]


@pytest.fixture(scope="module")
def server(served_repository, tmp_path_factory):
    with keyed_server(served_repository, tmp_path_factory.mktemp("keyed")) as keyed:
        yield keyed


def test_the_readme_snippet_verifies_a_customer_and_checks_the_signed_verdict(
        client_python, server, tmp_path):
    from kyc.keys import load_key
    from kyc.verdict import VerdictSigner, public_key_text

    run(*KYC, "samples", "--out", tmp_path, cwd=PROJECT_ROOT)
    public = public_key_text(VerdictSigner(load_key(server.token_key_environment)).public_key)
    code = (readme_snippet()
            .replace('"base64 of the server\'s verdict key"', repr(public))
            .replace('"localhost:8001"', repr(server.options.grpc_url)))
    # run as a reader runs it: in the folder of their photos, the client key in the
    # environment (keyed_server put it there), nothing of this project on the path
    printed = run(client_python, "-I", "-c", code, cwd=tmp_path,
                  env={CLIENT_KEY_ENV: os.environ[CLIENT_KEY_ENV], "PATH": "/usr/bin:/bin"})
    assert printed.strip() == "review ['liveness_missing']", printed
