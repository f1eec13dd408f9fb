"""LIVENESS_TOKEN: the result of a liveness session, encrypted and authenticated.

AES-256-GCM (``cryptography``) with a 96-bit random nonce per token. The token is
``"kyc2." + key id + "." + base64url(nonce || ciphertext || tag)``; the associated
data binds the format version and the key id. The key id (8 hex digits of a
SHA-256 of the key, which tells nothing of the key) names the key that sealed the
token, so a server holding another key says so instead of a bare "altered": every
replica behind one service must read the same key. Tokens of the earlier formats
(``"kyc1."`` with no key id; without a token id or the checks that ran) are refused:
no server has issued them since 2026-11-27, and a token lives 2 minutes.

Its plaintext is JSON: session id, verdict, score, issue and expiry times (Unix
seconds), the challenge, the embedding of the session's best frame (so
``kyc_ensemble`` can check that the selfie and the document show the live person),
and which checks ran and how each came out (so the decision knows whether passive
PAD ran: a verdict without it is of lower assurance), the application its START
named and its own random id (spent once: kyc.decision.ledger). A client can neither
read nor change it: a modified byte fails the tag, an expired token is refused.

The key (32 bytes) is the server's one secret, shared by every model that makes or reads
tokens, seals or verdicts (:mod:`kyc.keys`).
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
import time
from dataclasses import dataclass

import numpy as np

from kyc.keys import KEY_BYTES, KEY_ID_CHARS, TokenKeyError, key_id

PREFIX = "kyc2."
AAD = b"kyc-liveness-token-v2:"  # + the key id
RETIRED_PREFIXES = ("kyc1.",)  # formats no server issues any more
NONCE_BYTES = 12
# A real token is about 0.9 KB (128-d embedding) or 3 KB (512-d); anything longer is
# refused before it is decoded.
MAX_TOKEN_BYTES = 16384


class TokenError(ValueError):
    """A token that cannot be trusted: malformed, altered, from another key, expired."""


class TokenExpiredError(TokenError):
    """A genuine token past its expiry time."""


@dataclass(frozen=True)
class LivenessClaims:
    session: str
    is_live: bool
    score: float
    issued_at: float
    expires_at: float
    challenge: tuple[str, ...]
    embedding: np.ndarray | None  # float32, L2-normalised
    # check name -> True/False, or "not_configured"/"off" for one that did not run
    checks: dict
    # the application reference its START gave (None: unbound), and its own random id,
    # spent by the first verification (kyc.decision.ledger)
    application: str | None
    token_id: str

    @property
    def passive_pad(self) -> bool:
        """Whether a passive anti-spoofing model ran in the session (and passed)."""
        return self.checks.get("passive_pad") is True

    def to_json(self) -> bytes:
        embedding = None if self.embedding is None else base64.b64encode(
            np.asarray(self.embedding, dtype="<f4").tobytes()).decode()
        return json.dumps({"sid": self.session, "live": self.is_live, "score": self.score,
                           "iat": self.issued_at, "exp": self.expires_at,
                           "challenge": list(self.challenge), "emb": embedding,
                           "checks": self.checks, "app": self.application,
                           "jti": self.token_id},
                          separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> LivenessClaims:
        try:
            raw = json.loads(data)
            embedding = None if raw["emb"] is None else np.frombuffer(
                base64.b64decode(raw["emb"]), dtype="<f4").astype(np.float32)
        except (ValueError, KeyError, TypeError, binascii.Error) as exc:
            raise TokenError(f"token content is malformed: {type(exc).__name__}") from None
        checks, application, token_id = raw.get("checks"), raw.get("app"), raw.get("jti")
        if not isinstance(checks, dict) or not isinstance(token_id, str) or not token_id:
            raise TokenError("token of a retired format (no token id or checks): make a new "
                             "liveness session")
        if application is not None and not isinstance(application, str):
            raise TokenError("token content is malformed: app is not a string")
        try:
            return cls(str(raw["sid"]), bool(raw["live"]), float(raw["score"]),
                       float(raw["iat"]), float(raw["exp"]), tuple(raw["challenge"]), embedding,
                       checks, application, token_id)
        except (ValueError, KeyError, TypeError) as exc:
            raise TokenError(f"token content is malformed: {type(exc).__name__}") from None


class TokenSealer:
    """Seal and open liveness tokens with one key."""

    def __init__(self, key: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        if len(key) != KEY_BYTES:
            raise TokenKeyError(f"a token key is {KEY_BYTES} bytes")
        self._aead = AESGCM(key)
        self.key_id = key_id(key)

    def seal(self, claims: LivenessClaims) -> bytes:
        nonce = secrets.token_bytes(NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, claims.to_json(), AAD + self.key_id.encode())
        body = base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")
        return f"{PREFIX}{self.key_id}.{body}".encode()

    def _body(self, text: str) -> tuple[str, bytes]:
        """The base64 part of a token and its associated data."""
        if text.startswith(RETIRED_PREFIXES):
            raise TokenError("token of a retired format: make a new liveness session")
        if not text.startswith(PREFIX):
            raise TokenError("not a liveness token (wrong prefix)")
        kid, dot, body = text[len(PREFIX):].partition(".")
        if not dot or len(kid) != KEY_ID_CHARS:
            raise TokenError("token has no key id")
        if kid != self.key_id:
            raise TokenError(f"token was sealed with another token key (key id {kid[:8]!r}, "
                             f"this server's is {self.key_id!r}): every server must have "
                             "the same KYC_TOKEN_KEY")
        return body, AAD + kid.encode()

    def open(self, token: bytes, now: float | None = None) -> LivenessClaims:
        """The claims of a genuine, unexpired token; else :class:`TokenError`."""
        from cryptography.exceptions import InvalidTag

        if len(token) > MAX_TOKEN_BYTES:
            raise TokenError(f"token is longer than {MAX_TOKEN_BYTES} bytes")
        try:
            text = token.decode("ascii")
        except UnicodeDecodeError:
            raise TokenError("token is not ASCII") from None
        body, aad = self._body(text)
        try:
            blob = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        except (binascii.Error, ValueError):
            raise TokenError("token is not base64url") from None
        if len(blob) < NONCE_BYTES + 16:
            raise TokenError("token is too short")
        try:
            plain = self._aead.decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], aad)
        except InvalidTag:
            raise TokenError("token was altered or made with another key") from None
        claims = LivenessClaims.from_json(plain)
        if (time.time() if now is None else now) >= claims.expires_at:
            raise TokenExpiredError("token has expired")
        return claims
