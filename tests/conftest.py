"""Fixtures shared by unit and integration tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kyc_testing import build_tiny_repository, redis_server, tiny_onnx


@pytest.fixture
def tiny_repository(tmp_path: Path) -> Path:
    return build_tiny_repository(tmp_path / "repo")


@pytest.fixture
def onnx_factory() -> Callable[..., Path]:
    return tiny_onnx


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory) -> Iterator[str]:
    """A real redis-server for the session (the shared ledger of spent liveness
    tokens, kyc.decision.ledger): its URL."""
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url
