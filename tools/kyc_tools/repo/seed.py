"""``kyc repo seed``: put a model repository on a shared volume once, atomically.

On Kubernetes every server pod starts with an init container that seeds the shared
repository volume from the image's own repository (deploy/kubernetes). Several
pods may start at once: each copies into a hidden staging folder beside the
destination and renames it into place. ``rename`` onto a missing (or empty)
directory succeeds for exactly one of them; the others get ENOTEMPTY, drop their
copy and leave the winner's repository as it is. A repository already there is
never touched: later versions arrive through ``kyc repo publish``.
"""

from __future__ import annotations

import contextlib
import errno
import secrets
import shutil
from pathlib import Path

from kyc_tools.repo.check import check_repository
from kyc_tools.repo.publish import precompile_python_models
from kyc_tools.repo.safe_copy import UnsafeEntryError, copy_tree

STAGING_PREFIX = ".seed-"


class SeedError(RuntimeError):
    """The source is not a sound repository, or the destination cannot be written."""


def _holds_files(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


def seed(src: Path, dest: Path) -> bool:
    """Copy the repository ``src`` to ``dest`` unless ``dest`` already holds one.

    True when this call put it there, False when it was there already (or another
    seeder's copy won the race).
    """
    if _holds_files(dest):
        return False
    problems = check_repository(src)
    if problems:
        raise SeedError(f"{src} is not a sound repository: {problems[0]}"
                        + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = dest.parent / f"{STAGING_PREFIX}{dest.name}-{secrets.token_hex(4)}"
    try:
        copy_tree(src, staging,
                  ignore=shutil.ignore_patterns(".staging-*", ".old-*", ".publish.lock"))
        precompile_python_models(staging)
        staging.rename(dest)
    except UnsafeEntryError as exc:
        raise SeedError(f"cannot seed {dest}: {exc}") from None
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST) and _holds_files(dest):
            return False
        raise SeedError(f"cannot seed {dest}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            if staging.exists():
                shutil.rmtree(staging)
    return True
