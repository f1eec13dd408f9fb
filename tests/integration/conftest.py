"""A real tritonserver (from the nvidia-pytriton wheel) on free ports for the tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient

from kyc_testing import SHIPPED_REPOSITORY, copy_tree, require_weights, start_server
from kyc_tools.operator.server import TritonServer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def served_repository(tmp_path_factory) -> Path:
    """A copy of the shipped repository (tests may publish into it)."""
    require_weights()
    return copy_tree(SHIPPED_REPOSITORY, tmp_path_factory.mktemp("served") / "model_repository")


@pytest.fixture(scope="session")
def server(served_repository, tmp_path_factory) -> Iterator[TritonServer]:
    """One server over the shipped repository for the whole session."""
    log_file = tmp_path_factory.mktemp("logs") / "tritonserver.log"
    server = start_server(served_repository, log_file)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(server):
    """A gRPC client of the session's server, closed after the module (Triton waits for
    open connections on shutdown)."""
    c = grpcclient.InferenceServerClient(server.options.grpc_url)
    yield c
    c.close()
