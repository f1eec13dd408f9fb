"""The wheel (the image installs it) carries every package of the source tree."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; CI runs 3.11
expand = pytest.importorskip("setuptools.config.expand")

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_directory_is_listed_for_the_wheel():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    find = project["tool"]["setuptools"]["packages"]["find"]
    # What setuptools packages: its own discovery, with pyproject.toml's options.
    listed = set(expand.find_packages(**find, root_dir=str(ROOT)))
    found = set()
    for where in find["where"]:
        base = ROOT / where
        for init in base.rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            found.add(".".join(init.parent.relative_to(base).parts))
    assert found == listed
