"""The live sessions of one ``liveness_sequence`` instance, keyed by correlation id.

Triton routes every request of a sequence to the same model instance, but it does
not call the model when a sequence times out: idle sessions are evicted here
(``idle_ttl_s``), and at most ``max_sessions`` are held, so memory stays bounded.
A START for a live id resets it; END frees it. :class:`StartLimiter` bounds the
STARTs of one client or customer (challenge shopping: a recording waiting for the
challenge it holds).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable

from kyc.liveness.session import Session
from kyc.pipeline.step import UnavailableError


class SessionLimitError(UnavailableError):
    """Too many live sessions: a new one is refused (the live ones go on)."""


class SessionStore:
    def __init__(self, max_sessions: int, idle_ttl_s: float) -> None:
        self.max_sessions = max_sessions
        self.idle_ttl_s = idle_ttl_s
        self._sessions: OrderedDict[Hashable, Session] = OrderedDict()  # least recent first
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def evict_idle(self, now: float) -> int:
        """Drop the sessions idle for ``idle_ttl_s`` or more; how many went."""
        gone = 0
        while self._sessions:
            sid, session = next(iter(self._sessions.items()))
            if now - session.last_seen < self.idle_ttl_s:
                break
            del self._sessions[sid]
            gone += 1
        self.evicted += gone
        return gone

    def start(self, sid: Hashable, session: Session) -> bool:
        """Hold ``session`` under ``sid``, replacing any session of that id; whether one
        was replaced (abandoned: START again without END)."""
        replaced = self._sessions.pop(sid, None) is not None
        if len(self._sessions) >= self.max_sessions:
            raise SessionLimitError(f"{len(self._sessions)} liveness sessions are live, the "
                                    "most this server holds; try again later")
        self._sessions[sid] = session
        return replaced

    def get(self, sid: Hashable) -> Session | None:
        return self._sessions.get(sid)

    def touch(self, sid: Hashable) -> None:
        """Mark ``sid`` as the most recently used (the eviction order)."""
        self._sessions.move_to_end(sid)

    def end(self, sid: Hashable) -> Session | None:
        return self._sessions.pop(sid, None)


class StartLimitError(UnavailableError):
    """A client or customer started too many sessions lately: its START is refused."""


class StartLimiter:
    """STARTs per key (a client, a customer) in a sliding window, in memory.

    Keys are kept as salted BLAKE2b digests (the salt is random per process), never as
    given: an address or a customer number is personal data. At most ``max_keys`` are
    tracked; past that, the key seen least recently is forgotten first.
    """

    def __init__(self, limit: int, window_s: float, max_keys: int = 100_000) -> None:
        import secrets

        self.limit = limit
        self.window_s = window_s
        self.max_keys = max_keys
        self._salt = secrets.token_bytes(16)
        self._starts: OrderedDict[bytes, deque[float]] = OrderedDict()

    def _digest(self, key: str) -> bytes:
        import hashlib

        return hashlib.blake2b(key.encode("utf-8", "replace"), key=self._salt,
                               digest_size=16).digest()

    def retry_after_s(self, key: str, now: float) -> float:
        """0 when ``key`` may start now, else the seconds until it may."""
        if self.limit <= 0:
            return 0.0
        starts = self._starts.get(self._digest(key))
        if starts is None:
            return 0.0
        while starts and now - starts[0] >= self.window_s:
            starts.popleft()
        return 0.0 if len(starts) < self.limit else starts[0] + self.window_s - now

    def count(self, key: str, now: float) -> None:
        digest = self._digest(key)
        starts = self._starts.pop(digest, None) or deque()
        starts.append(now)
        self._starts[digest] = starts
        while len(self._starts) > self.max_keys:
            self._starts.popitem(last=False)
