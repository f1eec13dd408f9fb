"""The server's one secret: the 32-byte key that liveness tokens, the pipeline's seals and
signed verdicts all come from, beneath every step that uses it.

``KYC_TOKEN_KEY`` (base64) or ``KYC_TOKEN_KEY_FILE`` (a file holding it in base64).
``kyc serve`` creates a key file on first start; the Docker image refuses to start
without one. Each use has a key of its own, derived from it (:func:`derive_key`, HKDF
with the use's label): one secret to hold, none reusable for another purpose.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import secrets
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

KEY_ID_CHARS = 8
KEY_BYTES = 32
ENV_KEY = "KYC_TOKEN_KEY"
ENV_KEY_FILE = "KYC_TOKEN_KEY_FILE"


class TokenKeyError(RuntimeError):
    """No usable token key configured."""


def _decode_key(raw: bytes, where: str) -> bytes:
    try:
        key = base64.b64decode(raw.strip(), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != KEY_BYTES:
        raise TokenKeyError(f"{where}: a token key is {KEY_BYTES} bytes, base64-encoded")
    return key


def load_key(environ: dict[str, str] | None = None) -> bytes:
    """The token key from ``KYC_TOKEN_KEY`` or ``KYC_TOKEN_KEY_FILE``."""
    env = os.environ if environ is None else environ
    if env.get(ENV_KEY):
        return _decode_key(env[ENV_KEY].encode(), ENV_KEY)
    if env.get(ENV_KEY_FILE):
        path = Path(env[ENV_KEY_FILE])
        try:
            return _decode_key(path.read_bytes(), f"{ENV_KEY_FILE} ({path})")
        except OSError as exc:
            raise TokenKeyError(f"{ENV_KEY_FILE}: cannot read {path}: {exc.strerror}") from None
    raise TokenKeyError(f"no token key: set {ENV_KEY} (base64 of {KEY_BYTES} random bytes) "
                        f"or {ENV_KEY_FILE}")


def key_id(key: bytes) -> str:
    """The key's public name: 8 hex digits of a domain-separated SHA-256 of it."""
    return hashlib.sha256(b"kyc-liveness-token-key-id\0" + key).hexdigest()[:KEY_ID_CHARS]


def create_key_file(path: Path, text: str | None = None) -> Path:
    """Write a new random key (base64 of :data:`KEY_BYTES`; or ``text``) to ``path``,
    readable by its owner only, whole or not at all, unless the file exists already
    (another start's: it wins)."""
    from kyc.files import put_new_file

    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = text if text is not None else base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()
    put_new_file(path, (key + "\n").encode())
    return path


def derive_key(token_key: bytes, label: bytes) -> bytes:
    """A 32-byte key for ``label``'s use, from the token key (one secret to hold)."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=label).derive(token_key)
