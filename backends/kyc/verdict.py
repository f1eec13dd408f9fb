"""The server's side of the signed verdict: ``kyc_decision`` signs every REPORT
(:class:`VerdictSigner`) and reads the client's application reference
(:func:`application_ref`).

The verdict's format, and its checking, are declared once in the client distribution
(``kyc_client.verdict``, which documents them); this module re-exports them for the
server's code and for code written before the client had a distribution of its own.

The signing key is derived from the liveness token key (HKDF-SHA256, its own label):
every replica signs with the same key and nothing new is distributed.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from kyc_client.verdict import (  # noqa: F401  (re-exported: the format, declared there)
    ALG,
    APPLICATION_PARAMETER,
    CLOCK_SKEW_S,
    KEY_ID_CHARS,
    MAX_AGE_S,
    MAX_APPLICATION_CHARS,
    SIGNATURE_FIELD,
    VERDICT_VERSION,
    VerdictError,
    canonical,
    finite,
    image_digest,
    load_public_key,
    public_key_id,
    public_key_text,
    signed_claims,
    verify_verdict,
)

SIGNING_LABEL = b"kyc-verdict-signing-key-v1"


class VerdictSigner:
    """Signs REPORTs with the key derived from the token key."""

    def __init__(self, token_key: bytes) -> None:
        from kyc.keys import derive_key  # the one derivation of the server's keys

        self._private = Ed25519PrivateKey.from_private_bytes(
            derive_key(token_key, SIGNING_LABEL))
        self.public_key = self._private.public_key()
        self.key_id = public_key_id(self.public_key)

    def sign(self, report: Mapping[str, Any]) -> dict[str, Any]:
        """``report`` with its ``signature`` (and every float that is not finite as
        None, as it was signed: :func:`finite`)."""
        body = finite({k: v for k, v in report.items() if k != SIGNATURE_FIELD})
        signed = canonical({**body, "v": VERDICT_VERSION})
        value = self._private.sign(signed.encode())
        return {**body, SIGNATURE_FIELD: {"alg": ALG, "key_id": self.key_id, "signed": signed,
                                          "value": base64.b64encode(value).decode()}}


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
