"""A signed verdict: the operator's backend can check that a decision came from the
server untouched.

``kyc_decision`` signs, with Ed25519, a small JSON object of what the verdict is
(decision, reasons, the application reference the client gave, when, the digests of
the two images, the liveness session's token id, and the version of every model in
the repository that served it) and puts it in REPORT as ``signature``:
``{"alg": "Ed25519", "key_id", "signed": "<the JSON, as signed>", "value": base64}``.
The signed text travels as it was signed, so no verifier has to rebuild it: check the
signature over ``signed``'s UTF-8 bytes, then read the claims from it (never from the
rest of REPORT, which is unsigned detail).

The signing key is derived from the liveness token key (HKDF-SHA256, its own label):
every replica signs with the same key and nothing new is distributed. Only its
PUBLIC key leaves the server (``kyc keys verdict``): a backend that holds it can check
verdicts and can neither sign one nor mint a token. ``key_id``: 8 hex digits of a
SHA-256 of the public key.

Used by the server (signing) and by clients (:func:`verify_verdict`, ``kyc verdict
check``); only ``cryptography``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

ALG = "Ed25519"
VERDICT_VERSION = 1
SIGNING_LABEL = b"kyc-verdict-signing-key-v1"
KEY_ID_CHARS = 8


class VerdictError(ValueError):
    """A REPORT whose verdict is not signed, or not by this key, or altered."""


def _raw(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def public_key_id(public: Ed25519PublicKey) -> str:
    return hashlib.sha256(b"kyc-verdict-key-id\0" + _raw(public)).hexdigest()[:KEY_ID_CHARS]


def public_key_text(public: Ed25519PublicKey) -> str:
    """The public key as the backend keeps it: base64 of its 32 raw bytes."""
    return base64.b64encode(_raw(public)).decode()


def load_public_key(text: str | bytes) -> Ed25519PublicKey:
    """A public key from :func:`public_key_text`'s form, or PEM."""
    data = text.encode() if isinstance(text, str) else text
    if data.lstrip().startswith(b"-----BEGIN"):
        key = serialization.load_pem_public_key(data)
        if not isinstance(key, Ed25519PublicKey):
            raise VerdictError("the PEM key is not an Ed25519 public key")
        return key
    try:
        return Ed25519PublicKey.from_public_bytes(base64.b64decode(data.strip(), validate=True))
    except (binascii.Error, ValueError):
        raise VerdictError("a verdict public key is 32 bytes, base64-encoded, or PEM") from None


class VerdictSigner:
    """Signs verdicts with the key derived from the token key."""

    def __init__(self, token_key: bytes) -> None:
        from kyc.pipeline.seal import derive_key  # the one derivation of the server's keys

        self._private = Ed25519PrivateKey.from_private_bytes(
            derive_key(token_key, SIGNING_LABEL))
        self.public_key = self._private.public_key()
        self.key_id = public_key_id(self.public_key)

    def sign(self, claims: Mapping[str, Any]) -> dict[str, str]:
        signed = json.dumps({"v": VERDICT_VERSION, **claims}, sort_keys=True,
                            separators=(",", ":"), ensure_ascii=True)
        value = self._private.sign(signed.encode())
        return {"alg": ALG, "key_id": self.key_id, "signed": signed,
                "value": base64.b64encode(value).decode()}


def verify_verdict(report: Mapping[str, Any] | str | bytes,
                   public_key: Ed25519PublicKey | str | bytes) -> dict[str, Any]:
    """The signed claims of ``report`` (REPORT, parsed or as JSON text) when its
    signature holds under ``public_key``; :class:`VerdictError` else. Check the
    claims' ``application`` and ``decision`` against your own records."""
    if isinstance(report, str | bytes):
        report = json.loads(report)
    key = public_key if isinstance(public_key, Ed25519PublicKey) else load_public_key(public_key)
    signature = report.get("signature") if isinstance(report, Mapping) else None
    if not isinstance(signature, Mapping) or signature.get("alg") != ALG:
        raise VerdictError("the report carries no Ed25519 signature")
    if signature.get("key_id") != public_key_id(key):
        raise VerdictError(f"the verdict was signed with key {signature.get('key_id')!r}, "
                           f"not {public_key_id(key)!r}")
    try:
        key.verify(base64.b64decode(str(signature["value"]), validate=True),
                   str(signature["signed"]).encode())
    except (InvalidSignature, binascii.Error, ValueError, KeyError):
        raise VerdictError("the verdict's signature does not hold: altered or forged") from None
    claims = json.loads(signature["signed"])
    if claims.get("v") != VERDICT_VERSION:
        raise VerdictError(f"unknown verdict version {claims.get('v')!r}")
    return claims


# The application reference: the operator's own id of one application (one customer's
# verification), given as a request parameter at the liveness START and at
# kyc_ensemble. The token is bound to it, and the signed verdict names it.
APPLICATION_PARAMETER = "kyc_application"
MAX_APPLICATION_CHARS = 128


def application_ref(parameters: Mapping[str, Any]) -> str | None:
    """The request's application reference (None: none given); ValueError for one that
    is not printable ASCII of at most :data:`MAX_APPLICATION_CHARS` characters."""
    value = parameters.get(APPLICATION_PARAMETER)
    if value is None or value == "":
        return None
    if (not isinstance(value, str) or len(value) > MAX_APPLICATION_CHARS
            or not all(" " <= c <= "~" for c in value)):
        raise ValueError(f"parameter {APPLICATION_PARAMETER} must be printable ASCII of at "
                         f"most {MAX_APPLICATION_CHARS} characters")
    return value
