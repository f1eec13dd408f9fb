"""The wheel (the image installs it) carries every package of the source tree."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; CI runs 3.11

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_directory_is_listed_for_the_wheel():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(project["tool"]["setuptools"]["packages"])
    found = set()
    for name, where in project["tool"]["setuptools"]["package-dir"].items():
        base = ROOT / where
        for init in base.rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            relative = init.parent.relative_to(base).parts
            found.add(".".join((name, *relative)))
    assert found == listed
