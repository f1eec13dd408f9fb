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


def test_the_client_distribution_lists_every_package_under_client():
    project = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())
    listed = set(project["tool"]["setuptools"]["packages"])
    found = {".".join(init.parent.relative_to(ROOT / "client").parts)
             for init in (ROOT / "client").rglob("__init__.py")
             if not {"__pycache__", "build"} & set(init.parts)}  # build/: a wheel's work
    assert found == listed


def test_the_server_distribution_requires_the_client_at_its_version():
    server = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    client = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]
    assert f"{client['name']}=={client['version']}" in server["dependencies"]


@pytest.mark.parametrize(("written_before", "now"), [
    ("kyc_tools.client", "kyc_client.sdk"), ("kyc_tools.liveness_client", "kyc_client.liveness"),
    ("kyc_tools.channel", "kyc_client.channel")])
def test_the_client_modules_keep_the_names_code_was_written_with(written_before, now):
    import importlib

    assert importlib.import_module(written_before) is importlib.import_module(now)
