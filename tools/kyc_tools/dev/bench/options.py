"""What a ``kyc bench`` run is asked to do: its scenario groups and their
concurrency levels, the measured window, and its errors."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_REPOSITORY = Path("model_repository")
READY_TIMEOUT_S = 180.0
STOP_GRACE_S = 10.0
CLIENT_TIMEOUT_S = 120.0
LEVELS = (1, 2, 4, 8, 16)

# Scenario groups, in the order they run; each has the levels of a quick run.
GROUPS = ("kyc", "batching", "liveness", "document", "publish")
# "publish" sends one request at a time (first request after a version switch).
QUICK_LEVELS = {"kyc": (1, 2, 4), "batching": (1, 4, 16), "liveness": (1, 8),
                "document": (1,), "publish": (1,)}
FULL_LEVELS = {"kyc": LEVELS, "batching": LEVELS, "liveness": LEVELS, "document": (1, 2, 4),
               "publish": (1,)}
BATCHING_SPEEDUP_LEVEL = 16
LIVENESS_GOAL_SESSIONS = 8
OCR_LOAD_CLIENTS = 2


class BenchError(RuntimeError):
    """The benchmark could not run (missing weights, server did not start...)."""


class PeerUnavailableError(RuntimeError):
    """A peer that is not installed here (``make test`` installs the peers)."""


@dataclass(frozen=True)
class Window:
    """How long one concurrency level runs: a warm-up of at least ``warmup_s`` and
    one answer per client, then a window of at least ``window_s`` and
    ``min_requests`` answers; each phase ends after ``max_s`` whatever happened."""

    warmup_s: float = 3.0
    window_s: float = 10.0
    min_requests: int = 20
    max_s: float = 60.0


QUICK_WINDOW = Window(warmup_s=0.5, window_s=2.5, min_requests=4, max_s=20.0)


@dataclass(frozen=True)
class BenchOptions:
    model_repository: Path = DEFAULT_REPOSITORY
    quick: bool = False
    window: Window = Window()
    groups: tuple[str, ...] = ()  # empty: all of GROUPS
    levels: tuple[int, ...] = ()  # empty: each group's own
    url: str | None = None  # a running server (gRPC host:port) instead of our own
    admin_key: str | None = None  # of that server's model-repository API

    @classmethod
    def for_run(cls, *, quick: bool, model_repository: Path = DEFAULT_REPOSITORY,
                groups: Sequence[str] = (), levels: Sequence[int] = (),
                window_s: float | None = None, url: str | None = None,
                admin_key: str | None = None) -> BenchOptions:
        window = QUICK_WINDOW if quick else Window()
        if window_s is not None:
            window = dataclasses.replace(window, window_s=window_s)
        unknown = sorted(set(groups) - set(GROUPS))
        if unknown:
            raise BenchError(f"unknown scenario group(s) {', '.join(unknown)}; "
                             f"known: {', '.join(GROUPS)}")
        return cls(model_repository=model_repository, quick=quick, window=window,
                   groups=tuple(g for g in GROUPS if not groups or g in groups),
                   levels=tuple(sorted(set(levels))), url=url, admin_key=admin_key)

    def levels_of(self, group: str) -> tuple[int, ...]:
        if self.levels:
            return self.levels
        return (QUICK_LEVELS if self.quick else FULL_LEVELS)[group]

    def runs(self, group: str) -> bool:
        return not self.groups or group in self.groups
