"""A small file put in place whole or not at all, and never over another: the key files
``kyc serve`` makes and the entries of the ledger of spent tokens (kyc.decision.ledger)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def put_new_file(path: Path, data: bytes) -> bool:
    """``data`` into a new file at ``path``, readable by its owner only: written aside in
    the same folder (never through a link), then linked in, so that a reader finds the
    whole file or none. False when something was there already: the first writer wins,
    a link planted at ``path`` is neither followed nor replaced."""
    temporary = path.parent / f".{path.name}.{secrets.token_hex(6)}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    except BaseException:
        os.unlink(temporary)
        raise
    try:
        os.link(temporary, path)
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(temporary)
