"""Copy a folder dropped into the model repository without trusting what it holds.

Whoever can write into the repository (a mounted volume, a publisher) must not make
the server read files outside it: a symbolic link to ``/etc`` or to another model's
weights would be followed by a plain ``shutil.copytree``, and a fifo or a device would
hang or feed the copy. Only folders and regular files are copied; each is opened
relative to its already opened parent with ``O_NOFOLLOW``, so that a link swapped in
after the look is refused too, not followed.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

Ignore = Callable[[str, list[str]], Iterable[str]]  # shutil.copytree's ignore
_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class UnsafeEntryError(ValueError):
    """A dropped folder holds a symbolic link, a special file or an unsafe name."""


def check_plain_name(name: str, what: str = "model name") -> str:
    """``name`` if it is one plain path component (no ``/``, not ``.`` or ``..``)."""
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise UnsafeEntryError(f"{what} {name!r}: must be one plain name, not a path")
    return name


def copy_tree(src: Path, dest: Path, ignore: Ignore | None = None) -> None:
    """Copy the folder ``src`` to the new folder ``dest``: folders and regular files only.

    Raises :class:`UnsafeEntryError` naming the first entry refused; ``dest`` may then
    hold a partial copy, which the caller removes.
    """
    fd = _open(str(src), src, dir_fd=None, want=stat.S_ISDIR)
    try:
        _copy_dir(fd, src, dest, ignore)
    finally:
        os.close(fd)


def copy_file(src: Path, dest: Path) -> None:
    """Copy the regular file ``src`` to ``dest`` (refusing a link or a special file)."""
    fd = _open(str(src), src, dir_fd=None, want=stat.S_ISREG)
    try:
        _copy_contents(fd, dest)
    finally:
        os.close(fd)


def _copy_dir(dir_fd: int, shown: Path, dest: Path, ignore: Ignore | None) -> None:
    dest.mkdir()
    names = sorted(os.listdir(dir_fd))
    skipped = set(ignore(str(shown), names)) if ignore is not None else set()
    for name in (n for n in names if n not in skipped):
        kind = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        want = stat.S_ISDIR if stat.S_ISDIR(kind) else stat.S_ISREG
        _refuse_unless(want(kind), shown / name, kind)  # look before opening a device
        fd = _open(name, shown / name, dir_fd=dir_fd, want=want)
        try:
            if want is stat.S_ISDIR:
                _copy_dir(fd, shown / name, dest / name, ignore)
            else:
                _copy_contents(fd, dest / name)
        finally:
            os.close(fd)


def _open(name: str, shown: Path, dir_fd: int | None, want: Callable[[int], bool]) -> int:
    try:
        fd = os.open(name, _FLAGS | (os.O_DIRECTORY if want is stat.S_ISDIR else 0),
                     dir_fd=dir_fd)
    except OSError as exc:  # ELOOP: a link; ENOTDIR: not the folder it was a moment ago
        raise UnsafeEntryError(f"{shown}: refused, not a plain "
                               f"{'folder' if want is stat.S_ISDIR else 'file'} "
                               f"({exc.strerror})") from None
    mode = os.fstat(fd).st_mode
    if not want(mode):
        os.close(fd)
        _refuse_unless(False, shown, mode)
    return fd


def _refuse_unless(ok: bool, shown: Path, mode: int) -> None:
    if not ok:
        raise UnsafeEntryError(f"{shown}: refused, a {_kind(mode)}: a model folder may hold "
                               "only folders and regular files")


def _kind(mode: int) -> str:
    for test, kind in ((stat.S_ISLNK, "symbolic link"), (stat.S_ISFIFO, "fifo"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISDIR, "folder")):
        if test(mode):
            return kind
    return "special file"


def _copy_contents(fd: int, dest: Path) -> None:
    """The file open at ``fd`` into the new file ``dest``: its bytes, permission bits
    (never set-id) and times, as ``shutil.copy2`` would."""
    info = os.fstat(fd)
    with open(fd, "rb", closefd=False) as source, open(dest, "xb") as target:
        shutil.copyfileobj(source, target)
    os.chmod(dest, stat.S_IMODE(info.st_mode) & 0o777)
    os.utime(dest, ns=(info.st_atime_ns, info.st_mtime_ns))
