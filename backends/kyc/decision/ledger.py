"""One liveness token, one verification: the ledger of spent tokens.

``kyc_decision`` spends a token (its random id, sealed inside it) the first time it
reads it; the second verification with the same token is refused
(``liveness_token_reused``), whichever replica it reaches, when the replicas share a
ledger. The entry holds a digest of the verification that spent it (its application
and images), so a retry of that same verification (a reply lost on the way, retried
by the SDK) is answered again rather than refused; nothing of the customer is kept.
An entry lives until the token's own expiry, so the ledger holds at most the tokens
of one token lifetime.

Where the ledger is: ``KYC_TOKEN_LEDGER``.
- ``redis://[:PASSWORD@]HOST:PORT/DB``: a Redis server every replica reaches;
  one ``SET key holder NX EXAT expiry`` per token, atomic on the server, so two replicas
  spending the same token at once cannot both win. deploy/ runs one; ``make test``
  starts a real one for the replica test. A ledger that cannot be reached refuses
  the verification (``kyc_decision`` answers UNAVAILABLE): a token is never accepted
  unchecked.
- unset: this process's memory. ``kyc_decision`` has one instance per server, so a
  token is single-use per server; replicas without a shared ledger each accept it
  once (SECURITY.md).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Protocol

ENV_LEDGER = "KYC_TOKEN_LEDGER"
KEY_PREFIX = "kyc:token:"


class LedgerUnavailableError(RuntimeError):
    """The shared ledger did not answer: the token cannot be checked now."""


class Ledger(Protocol):
    def spend(self, token_id: str, expires_at: float, holder: str = "") -> bool:
        """True the first time ``token_id`` is spent, and again for the same ``holder``
        (a retry of that verification: kyc.decision.step's digest of its application
        and images); False for any other."""


class MemoryLedger:
    """Spent tokens in this process, forgotten at their expiry."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._spent: dict[str, tuple[float, str]] = {}  # token id -> (expiry, holder)
        self._lock = threading.Lock()
        self._clock = clock
        self._next_prune = 0.0

    def spend(self, token_id: str, expires_at: float, holder: str = "") -> bool:
        now = self._clock()
        with self._lock:
            if now >= self._next_prune:  # at most one sweep a second
                self._spent = {k: v for k, v in self._spent.items() if v[0] > now}
                self._next_prune = now + 1.0
            if token_id in self._spent:
                return bool(holder) and self._spent[token_id][1] == holder
            self._spent[token_id] = (expires_at, holder)
            return True


class RedisLedger:
    """Spent tokens in a Redis server shared by every replica: one ``SET key 1 NX EXAT
    expiry`` a token, over :class:`RespConnection`."""

    def __init__(self, url: str, timeout_s: float = 1.0) -> None:
        self.connection = RespConnection(url, timeout_s)

    def spend(self, token_id: str, expires_at: float, holder: str = "") -> bool:
        key = KEY_PREFIX + token_id
        reply = self.connection.command("SET", key, holder or "1", "NX", "EXAT",
                                        str(max(int(expires_at) + 1, 1)))
        if reply == "OK":
            return True
        # spent before: by this very verification when its reply was lost (the SDK
        # retries UNAVAILABLE), else by another
        return bool(holder) and self.connection.command("GET", key) == holder


class RespConnection:
    """A Redis connection that speaks RESP2 itself, for the few commands the ledger sends.

    Why not redis-py: the local server's Python stubs embed Debian's libpython 3.11.2
    with the venv's standard library (pyenv 3.11.7), whose ``_ssl`` does not load there,
    and redis-py imports ``ssl`` whatever the URL: kyc_decision would not start with a
    ledger configured. The protocol for SET/GET/TTL is a few lines. ``redis://[:PASSWORD
    @]HOST[:PORT][/DB]``; no TLS (the ledger is reached inside the cluster, under a
    NetworkPolicy). Any failure closes the socket (the next command reconnects) and
    raises :class:`LedgerUnavailableError`."""

    def __init__(self, url: str, timeout_s: float = 1.0) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        if parts.scheme != "redis" or not parts.hostname:
            raise ValueError(f"{ENV_LEDGER} must be redis://[:PASSWORD@]HOST[:PORT][/DB]")
        self.address = (parts.hostname, parts.port or 6379)
        self.password = parts.password
        self.db = int(parts.path.strip("/") or 0)
        self.timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self._file = None
        self._lock = threading.Lock()

    def command(self, *args: str) -> str | int | None:
        with self._lock:
            try:
                if self._sock is None:
                    self._connect()
                return self._roundtrip(args)
            except (OSError, ValueError) as exc:
                self.close()
                raise LedgerUnavailableError(
                    f"the token ledger did not answer ({type(exc).__name__})") from None

    def _connect(self) -> None:
        self._sock = socket.create_connection(self.address, timeout=self.timeout_s)
        self._file = self._sock.makefile("rb")
        if self.password:
            self._roundtrip(("AUTH", self.password))
        if self.db:
            self._roundtrip(("SELECT", str(self.db)))

    def _roundtrip(self, args: tuple[str, ...]) -> str | int | None:
        encoded = [a.encode() for a in args]
        self._sock.sendall(b"*%d\r\n" % len(encoded) + b"".join(  # type: ignore[union-attr]
            b"$%d\r\n%s\r\n" % (len(a), a) for a in encoded))
        return self._reply()

    def _reply(self) -> str | int | None:
        line = self._file.readline()  # type: ignore[union-attr]
        if not line.endswith(b"\r\n"):
            raise ConnectionError("the connection closed")
        kind, body = line[:1], line[1:-2].decode()
        if kind == b"+":
            return body
        if kind == b":":
            return int(body)
        if kind == b"$":
            size = int(body)
            return None if size < 0 else self._file.read(size + 2)[:-2].decode()  # type: ignore[union-attr]
        if kind == b"-":
            raise ValueError(f"redis refused: {body.split(' ', 1)[0]}")
        raise ValueError("not a RESP2 reply")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = self._file = None


def ledger_from_environ(environ: Mapping[str, str] | None) -> Ledger:
    """The ledger ``KYC_TOKEN_LEDGER`` names, else this process's memory."""
    import os

    url = (os.environ if environ is None else environ).get(ENV_LEDGER, "")
    if not url:
        return MemoryLedger()
    return RedisLedger(url)
