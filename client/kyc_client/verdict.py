"""A signed verdict: the operator's backend can check that a REPORT came from the
server untouched, every field of it.

``kyc_decision`` signs, with Ed25519, the whole REPORT but the signature itself: the
decision and reasons, the identity read from the document, the face-match and fraud
scores, the liveness evidence, the client's application reference, when
(``issued_at``), the digests of the two images, the liveness token's id and the
version of every model that was serving. It puts the signature in REPORT as
``signature``: ``{"alg": "Ed25519", "key_id", "signed": "<canonical JSON>", "value":
base64}``. ``signed`` is the REPORT without ``signature``, plus ``"v": 2``, as
canonical JSON (keys sorted, no spaces, ASCII; :func:`canonical`). It travels as it
was signed, so no verifier has to rebuild it byte for byte:

1. check the signature over ``signed``'s UTF-8 bytes with the server's public key;
2. parse ``signed`` and check ``v``;
3. check that the rest of REPORT, parsed, equals it (a verifier in another language
   compares parsed JSON values; this module does);
4. check the application you expected and the age of ``issued_at``
   (:func:`verify_verdict` does 1-4, and the images' digests when given the images).

Version 1 (before 2026-11-28) signed a few claims and left the identity and the scores
outside; it is refused (an old verdict of the same key with its unsigned part edited
would otherwise pass).

The server signs with a key derived from its liveness token key (``kyc.verdict``).
Only its PUBLIC key leaves the server (``kyc verdict public-key``): a backend that holds
it can check verdicts and can neither sign one nor mint a token. ``key_id``: 8 hex
digits of a SHA-256 of the public key.

This module is the verdict's format, declared once: the server signs by it
(``kyc.verdict``), clients check by it (:func:`verify_verdict`, ``kyc verdict check``).
Only ``cryptography``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import time
from collections.abc import Mapping
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

ALG = "Ed25519"
VERDICT_VERSION = 2
KEY_ID_CHARS = 8
SIGNATURE_FIELD = "signature"
# How old a verdict verify_verdict takes by default: a backend checks a verdict as it
# gets it (seconds); one kept for an audit is checked with max_age_s=None.
MAX_AGE_S = 300.0
CLOCK_SKEW_S = 30.0  # a verdict issued this far "in the future" is still taken


class VerdictError(ValueError):
    """A REPORT whose verdict is not signed, or not by this key, or altered, or not the
    one the backend expected (another application, too old)."""


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


def finite(value: Any) -> Any:
    """``value`` with every float that is not finite (NaN, inf) as None: JSON has no such
    numbers, and a NaN never equals itself, so it could not be compared once signed."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def canonical(claims: Mapping[str, Any]) -> str:
    """The canonical JSON text of ``claims``: keys sorted, no spaces, ASCII only."""
    return json.dumps(claims, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)


DIGEST_BYTES = 16  # 128 bits: a collision costs 2^64 work, a forgery 2^128


def image_digest(image: bytes | bytearray | memoryview) -> str:
    """The digest REPORT's ``images`` names an image by (what ``kyc_intake`` sealed,
    ``kyc.pipeline.seal.digest``): the first 32 hex digits of SHA-256 over ``b"b"`` and
    the image's bytes."""
    h = hashlib.sha256(b"b")
    h.update(image)
    return h.hexdigest()[: 2 * DIGEST_BYTES]


def signed_claims(report: Mapping[str, Any] | str | bytes,
                  public_key: Ed25519PublicKey | str | bytes) -> dict[str, Any]:
    """Steps 1-3 of the module docstring: the signed REPORT (without ``v``) when its
    signature holds under ``public_key`` and the rest of it is what was signed."""
    if isinstance(report, str | bytes):
        report = json.loads(report)
    key = public_key if isinstance(public_key, Ed25519PublicKey) else load_public_key(public_key)
    signature = report.get(SIGNATURE_FIELD) if isinstance(report, Mapping) else None
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
    version = claims.pop("v", None)
    if version != VERDICT_VERSION:
        raise VerdictError(f"a verdict of version {version!r} is refused: version "
                           f"{VERDICT_VERSION} signs the whole report")
    if not _same_json(claims, {k: v for k, v in report.items() if k != SIGNATURE_FIELD}):
        raise VerdictError("the report differs from what was signed: altered")
    return claims


def _same_json(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Equal as canonical text: equal values of other JSON types (true and 1) differ."""
    try:
        return canonical(a) == canonical(b)
    except ValueError:  # a NaN or infinity, which no signed report holds
        return False


def verify_verdict(report: Mapping[str, Any] | str | bytes,
                   public_key: Ed25519PublicKey | str | bytes, *, application: str | None,
                   max_age_s: float | None = MAX_AGE_S, now: float | None = None,
                   images: tuple[bytes, bytes] | None = None) -> dict[str, Any]:
    """The signed REPORT (``report``, parsed or JSON text) when its signature holds under
    ``public_key``, nothing in it was changed, it names ``application`` (the reference
    your backend gave this verification; None: it gave none) and was issued at most
    ``max_age_s`` ago (None: any age, for an audit of stored verdicts), and, when
    ``images`` (document, selfie) are given, it judged those very bytes;
    :class:`VerdictError` else. Act on what it returns: the decision and the identity."""
    claims = signed_claims(report, public_key)
    if claims.get("application") != application:
        raise VerdictError("the verdict is of another application than the one expected")
    _check_age(claims.get("issued_at"), max_age_s, time.time() if now is None else now)
    if images is not None:
        sent = {"document": image_digest(images[0]), "selfie": image_digest(images[1])}
        if claims.get("images") != sent:
            raise VerdictError("the verdict judged other images than the ones given")
    return claims


def _check_age(issued_at: Any, max_age_s: float | None, now: float) -> None:
    if not isinstance(issued_at, int | float) or isinstance(issued_at, bool):
        raise VerdictError("the verdict carries no issued_at")
    if issued_at > now + CLOCK_SKEW_S:
        raise VerdictError("the verdict was issued in the future: check the clocks")
    if max_age_s is not None and now - issued_at > max_age_s:
        raise VerdictError(f"the verdict is older than {max_age_s:g} s")


# The application reference: the operator's own id of one application (one customer's
# verification), given as a request parameter at the liveness START and at
# kyc_ensemble. The token is bound to it, and the signed verdict names it.
APPLICATION_PARAMETER = "kyc_application"
MAX_APPLICATION_CHARS = 128
