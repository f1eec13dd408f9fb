"""``kyc repo publish``: ship a new version of a model into a live repository.

A poll-mode server that sees a version folder half-copied can wedge for good
(shared/notes/triton-local.md), so a version is never built in place:

1. copy SRC into ``<model>/.staging-<token>/`` (a non-numeric sub-folder of the
   model, which Triton ignores, on the same filesystem as its destination);
2. check it against the model's config exactly as ``kyc repo check`` would;
3. precompile its Python files, since the first import would otherwise write
   ``__pycache__`` into the live folder and trigger one more reload;
4. ``rename`` it to the next version number: the server sees it whole or not
   at all.
"""

from __future__ import annotations

import compileall
import contextlib
import fcntl
import logging
import os
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kyc_tools.repo.check import CONFIG, Problem, check_model, version_dirs
from kyc_tools.repo.safe_copy import UnsafeEntryError, check_plain_name, copy_file, copy_tree

log = logging.getLogger(__name__)

STAGING_PREFIX = ".staging-"
LOCK_FILE = ".publish.lock"


class PublishError(RuntimeError):
    """The version was not published; the repository is unchanged."""

    def __init__(self, message: str, problems: list[Problem] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or []


@dataclass(frozen=True)
class Published:
    model: str
    version: int
    path: Path
    problems: list[Problem] = field(default_factory=list)  # ignored with force=True


@contextlib.contextmanager
def _model_lock(model_dir: Path) -> Iterator[None]:
    """Serialise publishers of one model (two must not take the same number)."""
    with open(model_dir / LOCK_FILE, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _copy_source(src: Path, staging: Path) -> None:
    """Folders and regular files only (kyc_tools.repo.safe_copy): a link or a fifo in what is
    published is refused, never followed into the repository."""
    try:
        if src.is_dir() and not src.is_symlink():
            copy_tree(src, staging, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".*"))
        else:
            staging.mkdir()
            copy_file(src, staging / src.name)
    except UnsafeEntryError as exc:
        raise PublishError(f"{src} refused: {exc}") from None


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    for path in [*root.rglob("*"), root]:
        fsync_path(path)


def precompile_python_models(root: Path) -> None:
    """Write the bytecode of every Python file under ``root`` before a server sees it.

    The stub ignores PYTHONDONTWRITEBYTECODE (measured: with it in the stub's
    environment, the first load still wrote ``1/__pycache__``), and a poll-mode
    server that sees ``__pycache__`` appear reloads that model about 2 s later,
    dropping its state (liveness sessions) and its statistics. With the bytecode
    already there and current, the stub writes nothing. A read-only tree is left
    as it is (nothing can be written into it then either).
    """
    with contextlib.suppress(OSError):
        compileall.compile_dir(str(root), quiet=2)


def next_version(model_dir: Path) -> int:
    versions = version_dirs(model_dir)
    return int(versions[-1].name) + 1 if versions else 1


def publish(repository: Path, model: str, src: Path, *, force: bool = False) -> Published:
    """Publish ``src`` (a version folder's content, or one file) as the next version.

    Raises :class:`PublishError` when the model does not exist, ``src`` is
    missing, or the staged version fails the checks (unless ``force``; then the
    problems are returned and the version goes in anyway, which is how a broken
    version reaches a server to prove the old one keeps serving).
    """
    try:
        model_dir = repository / check_plain_name(model)
    except UnsafeEntryError as exc:
        raise PublishError(str(exc)) from None
    if not (model_dir / CONFIG).is_file():
        raise PublishError(f"no model '{model}' in {repository} (no {model}/{CONFIG})")
    if not src.exists():
        raise PublishError(f"{src} does not exist")
    with _model_lock(model_dir):
        version = next_version(model_dir)
        staging = model_dir / f"{STAGING_PREFIX}{secrets.token_hex(4)}"
        try:
            _copy_source(src, staging)
            _, problems = check_model(model_dir, root=repository, versions=[staging])
            # Report the problems under the version's final name.
            problems = [
                Problem(p.path.replace(staging.name, str(version)), p.message) for p in problems
            ]
            if problems and not force:
                raise PublishError(
                    f"{model} version {version} refused: {len(problems)} problem(s)", problems
                )
            precompile_python_models(staging)
            fsync_tree(staging)
            target = model_dir / str(version)
            os.rename(staging, target)
            fsync_path(model_dir)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    log.info("published %s version %d", model, version)
    return Published(model, version, target, problems)

