"""One liveness token, one verification: the ledger of spent tokens.

``kyc_decision`` spends a token (its random id, sealed inside it) the first time it
reads it; the second verification with the same token is refused
(``liveness_token_reused``), whichever replica it reaches, when the replicas share a
ledger. An entry lives until the token's own expiry, so the ledger holds at most the
tokens of one token lifetime.

Where the ledger is: ``KYC_TOKEN_LEDGER``.
- ``redis://HOST:PORT/DB`` (or ``rediss://``): a Redis server every replica reaches;
  one ``SET key 1 NX EXAT expiry`` per token, atomic on the server, so two replicas
  spending the same token at once cannot both win. deploy/ runs one; ``make test``
  starts a real one for the replica test. A ledger that cannot be reached refuses
  the verification (``kyc_decision`` answers UNAVAILABLE): a token is never accepted
  unchecked.
- unset: this process's memory. ``kyc_decision`` has one instance per server, so a
  token is single-use per server; replicas without a shared ledger each accept it
  once (SECURITY.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Protocol

ENV_LEDGER = "KYC_TOKEN_LEDGER"
KEY_PREFIX = "kyc:token:"


class LedgerUnavailableError(RuntimeError):
    """The shared ledger did not answer: the token cannot be checked now."""


class Ledger(Protocol):
    def spend(self, token_id: str, expires_at: float) -> bool:
        """True the first time ``token_id`` is spent, False after."""


class MemoryLedger:
    """Spent tokens in this process, forgotten at their expiry."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._spent: dict[str, float] = {}
        self._lock = threading.Lock()
        self._clock = clock
        self._next_prune = 0.0

    def spend(self, token_id: str, expires_at: float) -> bool:
        now = self._clock()
        with self._lock:
            if now >= self._next_prune:  # at most one sweep a second
                self._spent = {k: t for k, t in self._spent.items() if t > now}
                self._next_prune = now + 1.0
            if token_id in self._spent:
                return False
            self._spent[token_id] = expires_at
            return True


class RedisLedger:
    """Spent tokens in a Redis server shared by every replica."""

    def __init__(self, url: str, timeout_s: float = 1.0) -> None:
        import redis  # only where a shared ledger is configured

        self._redis = redis.Redis.from_url(url, socket_timeout=timeout_s,
                                           socket_connect_timeout=timeout_s)
        self._errors = (redis.RedisError, OSError)

    def spend(self, token_id: str, expires_at: float) -> bool:
        try:
            return bool(self._redis.set(KEY_PREFIX + token_id, b"1", nx=True,
                                        exat=max(int(expires_at) + 1, 1)))
        except self._errors as exc:
            raise LedgerUnavailableError(
                f"the token ledger did not answer ({type(exc).__name__})") from None


def ledger_from_environ(environ: Mapping[str, str] | None) -> Ledger:
    """The ledger ``KYC_TOKEN_LEDGER`` names, else this process's memory."""
    import os

    url = (os.environ if environ is None else environ).get(ENV_LEDGER, "")
    if not url:
        return MemoryLedger()
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError(f"{ENV_LEDGER} must be a redis:// URL")
    return RedisLedger(url)
