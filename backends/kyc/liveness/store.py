"""The live sessions of one ``liveness_sequence`` instance, keyed by correlation id.

Triton routes every request of a sequence to the same model instance, but it does
not call the model when a sequence times out: idle sessions are evicted here
(``idle_ttl_s``), and at most ``max_sessions`` are held, so memory stays bounded.
A START for a live id resets it; END frees it.
"""

from __future__ import annotations

from collections import OrderedDict
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

    def start(self, sid: Hashable, session: Session) -> None:
        """Hold ``session`` under ``sid``, replacing any session of that id."""
        self._sessions.pop(sid, None)
        if len(self._sessions) >= self.max_sessions:
            raise SessionLimitError(f"{len(self._sessions)} liveness sessions are live, the "
                                    "most this server holds; try again later")
        self._sessions[sid] = session

    def get(self, sid: Hashable) -> Session | None:
        return self._sessions.get(sid)

    def touch(self, sid: Hashable) -> None:
        """Mark ``sid`` as the most recently used (the eviction order)."""
        self._sessions.move_to_end(sid)

    def end(self, sid: Hashable) -> Session | None:
        return self._sessions.pop(sid, None)
