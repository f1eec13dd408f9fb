"""Install a converted model into a Triton model repository, atomically.

Files are written into ``<repository>/<model>/.staging-<random>/`` and the folder is
then renamed to ``<repository>/<model>/1``. Staging happens inside the model's own
folder: it is on the same file system (so the rename is atomic), and Triton ignores
non-numeric sub-folders of a model folder, whereas a hidden folder in the
repository root would be loaded as a model. Concurrent installs into the same
model folder are not supported.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import shutil
import time
from collections.abc import Mapping
from pathlib import Path

import onnx

from kyc_tools.assets.fetch import sha256_file
from kyc_tools.assets.files import fsync_dir, write_synced

from .errors import InstallError

logger = logging.getLogger(__name__)

MODEL_FILE = "model.onnx"
VERSION = "1"
EXTRA_FILE_KEY = "kyc.extra_file."
_STAGING = ".staging-"
_OLD = ".old-"
_STALE_STAGING_S = 3600


def installed_metadata(model_dir: Path) -> dict[str, str] | None:
    """metadata_props of ``<model_dir>/1/model.onnx``, or None if absent or unreadable."""
    path = Path(model_dir) / VERSION / MODEL_FILE
    if not path.is_file():
        return None
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # a truncated or foreign file: reinstall it
        logger.warning("%s is not a readable ONNX model (%s); it will be replaced", path, exc)
        return None
    return {p.key: p.value for p in model.metadata_props}


def is_up_to_date(model_dir: Path, expected: Mapping[str, str]) -> bool:
    """True when the installed model was built from the same source by the same converter.

    Compares ``kyc.source_sha256`` and ``kyc.converter_version`` with ``expected`` and
    checks every extra file the model's metadata records (``kyc.extra_file.<name>.sha256``).
    """
    meta = installed_metadata(model_dir)
    if meta is None:
        return False
    for key in ("kyc.source_sha256", "kyc.converter_version"):
        if meta.get(key) != expected.get(key):
            logger.info(
                "%s: %s changed (%s -> %s)", model_dir.name, key, meta.get(key), expected.get(key)
            )
            return False
    version_dir = Path(model_dir) / VERSION
    for key, digest in meta.items():
        if key.startswith(EXTRA_FILE_KEY) and key.endswith(".sha256"):
            extra = version_dir / key[len(EXTRA_FILE_KEY) : -len(".sha256")]
            if not extra.is_file() or sha256_file(extra) != digest:
                logger.info("%s: %s is missing or modified", model_dir.name, extra.name)
                return False
    return True


def install(
    model_dir: Path, model: onnx.ModelProto, extra_files: Mapping[str, bytes] | None = None
) -> Path:
    """Write ``model`` (and ``extra_files``) as ``<model_dir>/1/`` and return that path.

    An existing ``1/`` is swapped out by two renames and deleted afterwards, so Triton
    (or a reader) sees either the complete old version or the complete new one.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise InstallError(f"{model_dir} is not a directory")
    _remove_leftovers(model_dir)
    staging = model_dir / f"{_STAGING}{secrets.token_hex(6)}"
    final = model_dir / VERSION
    old: Path | None = None
    try:
        staging.mkdir()  # honours the umask, unlike mkdtemp's 0700: Triton may run as another user
        write_synced(staging / MODEL_FILE, model.SerializeToString())
        for name, data in (extra_files or {}).items():
            write_synced(staging / name, data)
        fsync_dir(staging)
        if final.exists():
            old = model_dir / f"{_OLD}{secrets.token_hex(6)}"
            try:
                os.rename(final, old)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                old = None
                _replace_files(staging, final)
                return final
        os.rename(staging, final)
        fsync_dir(model_dir)
    except OSError as exc:
        if old is not None and not final.exists():
            os.rename(old, final)  # put the previous version back
            old = None
        shutil.rmtree(staging, ignore_errors=True)
        raise InstallError(f"{model_dir.name}: cannot install into {final}: {exc}") from exc
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _replace_files(staging: Path, final: Path) -> None:
    """Move each staged file into ``final`` (each replaced atomically), then drop ``staging``.

    For an overlay file system that cannot rename a directory of a lower layer (EXDEV):
    a Docker build whose COPY brought the version folder. There no server watches the
    folder, so a file-by-file swap is safe where the folder swap is impossible.
    """
    logger.info("%s cannot be renamed on this file system: replacing its files", final)
    for entry in sorted(staging.iterdir()):
        os.replace(entry, final / entry.name)
    fsync_dir(final)
    staging.rmdir()


def _remove_leftovers(model_dir: Path) -> None:
    """Delete ``.old-*`` folders and ``.staging-*`` folders an interrupted run left behind."""
    now = time.time()
    for entry in model_dir.iterdir():
        if not entry.is_dir():
            continue
        stale_staging = (
            entry.name.startswith(_STAGING) and now - entry.stat().st_mtime > _STALE_STAGING_S
        )
        if entry.name.startswith(_OLD) or stale_staging:
            logger.info("removing leftover %s", entry)
            shutil.rmtree(entry, ignore_errors=True)
