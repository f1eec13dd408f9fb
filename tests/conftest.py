"""Fixtures shared by unit and integration tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kyc_testing import build_tiny_repository, tiny_onnx


@pytest.fixture
def tiny_repository(tmp_path: Path) -> Path:
    return build_tiny_repository(tmp_path / "repo")


@pytest.fixture
def onnx_factory() -> Callable[..., Path]:
    return tiny_onnx
