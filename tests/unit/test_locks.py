"""locks/: every dependency pinned with hashes, and in step with constraints.txt."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from kyc_testing import MODEL_RUNTIMES

ROOT = Path(__file__).resolve().parents[2]
LOCKS = ROOT / "locks"
PYTHONS = ("3.10", "3.11")
# Installed outside locks/dev-*: torch (a CPU build from the machine's local wheels).
NOT_LOCKED = {"torch"}


def locked(path: Path) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of a lock file written by scripts/lock.sh."""
    entries: dict[str, tuple[str, list[str]]] = {}
    current = None
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9._-]+)==([^ ;\\]+)", line)
        if match:
            current = canonicalize_name(match.group(1))
            entries[current] = (match.group(2), [])
        elif current and (h := re.search(r"--hash=(sha256:[0-9a-f]{64})", line)):
            entries[current][1].append(h.group(1))
    return entries


def constraints() -> list[Requirement]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    return [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]


LOCK_FILES = sorted(LOCKS.glob("*.lock"))


def test_there_is_a_lock_per_supported_python_and_for_the_no_deps_installs():
    names = {p.name for p in LOCK_FILES}
    for py in PYTHONS:
        assert {f"dev-py{py}.lock", f"runtime-py{py}.lock", f"client-py{py}.lock"} <= names
    assert {"triton.lock", "peers.lock", "kserve.lock", "build.lock"} <= names


@pytest.mark.parametrize("lock", LOCK_FILES, ids=lambda p: p.name)
def test_every_locked_package_has_an_exact_version_and_sha256_hashes(lock):
    entries = locked(lock)
    assert entries, f"{lock.name} pins nothing"
    unhashed = [name for name, (_, hashes) in entries.items() if not hashes]
    assert not unhashed, f"{lock.name}: no hash for {unhashed}"


@pytest.mark.parametrize("py", PYTHONS)
def test_the_locks_pin_what_constraints_txt_pins(py):
    """A pin changed in constraints.txt without `make lock` fails here."""
    environment = {"python_version": py, "python_full_version": f"{py}.0"}
    pinned = {**locked(LOCKS / f"dev-py{py}.lock"), **locked(LOCKS / "triton.lock"),
              **locked(LOCKS / "peers.lock"), **locked(LOCKS / "kserve.lock"),
              **locked(LOCKS / "build.lock")}
    for req in constraints():
        name = canonicalize_name(req.name)
        if name in NOT_LOCKED or (req.marker and not req.marker.evaluate(environment)):
            continue
        version = next(iter(req.specifier)).version
        assert name in pinned, f"{req.name} is in constraints.txt but not locked for {py}"
        assert pinned[name][0] == version, (
            f"{req.name}: constraints.txt {version}, locks {pinned[name][0]} (run `make lock`)")


def test_the_runtime_lock_is_the_dev_lock_without_the_tools():
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    runtime, dev = locked(LOCKS / f"runtime-py{py}.lock"), locked(LOCKS / f"dev-py{py}.lock")
    assert {"numpy", "onnxruntime", "tritonclient", "cryptography"} <= set(runtime)
    assert not {"pytest", "ruff", "matplotlib"} & set(runtime)
    differ = {n: (v, dev[n][0]) for n, (v, _) in runtime.items() if n in dev and dev[n][0] != v}
    assert not differ, f"runtime and dev locks disagree: {differ}"



@pytest.mark.parametrize("py", PYTHONS)
def test_the_client_lock_holds_no_model_runtime_and_agrees_with_the_server(py):
    client, runtime = locked(LOCKS / f"client-py{py}.lock"), locked(LOCKS / f"runtime-py{py}.lock")
    assert {"tritonclient", "grpcio", "cryptography", "numpy"} <= set(client)
    assert not MODEL_RUNTIMES & set(client)
    differ = {n: (v, runtime[n][0]) for n, (v, _) in client.items()
              if n in runtime and runtime[n][0] != v}
    assert not differ, f"client and runtime locks disagree: {differ}"
