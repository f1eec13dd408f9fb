"""Let open liveness sessions and queued requests finish before Triton is told to stop.

Measured on Triton 2.51 (tests/integration/test_drain.py): once tritonserver gets
SIGTERM it reports not ready, refuses new requests ("Server is stopping") and still
takes the next frame of an open sequence, but ``liveness_sequence``'s BLS call to
the face detector is refused ("Server not ready"), so every open session fails. Its
exit timeout does not help sessions. Nor does it help a kyc_ensemble request in
flight: the next step's enqueue is refused ("Server is stopping, scheduler for model
has stopped accepting new inference requests"; measured in the image by
tests/integration/test_image.py). So ``kyc serve --drain-secs`` waits first, with
Triton still serving, until no liveness session is open, no request is pending and
none has been answered for a quiet moment (none in execution), or the sessions left
have had no frame for the model's idle time (their clients are gone: the model would
evict them), or the time is up; only then does it stop Triton. On Kubernetes the pod
is out of the Service's endpoints by then (preStop), so new connections go elsewhere.

The figures come from Triton's metrics endpoint: ``kyc_liveness_sessions_live``
(published by ``liveness_sequence``), every model's request counters and
``nv_inference_pending_request_count``.
"""

from __future__ import annotations

import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

LIVE = "kyc_liveness_sessions_live"
MODEL = "liveness_sequence"
_SAMPLE = re.compile(r"^(\w+)(\{[^}]*\})?\s+(\S+)$")


@dataclass(frozen=True)
class ServerLoad:
    """What the server is busy with, from its metrics endpoint."""

    open_sessions: float
    requests: float  # liveness_sequence requests so far (answered or failed)
    pending: float = 0.0  # requests queued for execution, all models
    answered: float = 0.0  # requests answered or failed so far, all models


@dataclass(frozen=True)
class DrainResult:
    reason: str  # "drained", "sessions_idle", "deadline", "interrupted", "no_metrics"
    waited_s: float
    open_sessions: float


def parse_server_load(text: str) -> ServerLoad | None:
    """The figures of a Prometheus text exposition; None without the liveness gauge."""
    live = requests = pending = answered = 0.0
    seen = False
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, labels, value = match.group(1), match.group(2) or "", float(match.group(3))
        if name == LIVE:
            live, seen = live + value, True
        elif name in ("nv_inference_request_success", "nv_inference_request_failure"):
            answered += value
            if f'model="{MODEL}"' in labels:
                requests += value
        elif name == "nv_inference_pending_request_count":
            pending += value
    return ServerLoad(live, requests, pending, answered) if seen else None


_LABEL = re.compile(r'(\w+)="([^"]*)"')


def sessions_by_version(text: str) -> dict[tuple[str, int], float]:
    """Open liveness sessions plus queued requests per ``(model, version)`` from a
    Prometheus exposition (how ``kyc_tools.operator.live`` knows when an older version of a
    stateful model has nothing left to do)."""
    found: dict[tuple[str, int], float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        # requests queued for a version count too: a START waiting there is a session
        if not match or match.group(1) not in (LIVE, "nv_inference_pending_request_count"):
            continue
        labels = dict(_LABEL.findall(match.group(2) or ""))
        version = labels.get("version", "")
        if version.isdigit():
            key = (labels.get("model", MODEL), int(version))
            found[key] = found.get(key, 0.0) + float(match.group(3))
    return found


def read_server_load(metrics_url: str, timeout: float = 2.0) -> ServerLoad | None:
    try:
        with urllib.request.urlopen(metrics_url, timeout=timeout) as reply:
            return parse_server_load(reply.read().decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError, ValueError):
        return None


# Triton counts a request as pending while it is queued, not while a model executes it,
# and exposes no gauge of requests in execution. A kyc_ensemble request in flight moves
# through its steps, each answered step counted: so nothing is in flight once no request
# is pending and no model has answered one for this long (longer than any single step
# here: the slowest, a document's OCR steps, take a few hundred ms on 2 CPU cores).
QUIET_S = 1.0


def drain(read: Callable[[], ServerLoad | None], *, deadline_s: float, idle_s: float,
          quiet_s: float = QUIET_S, interrupted: threading.Event | None = None,
          poll_s: float = 0.5, clock: Callable[[], float] = time.monotonic) -> DrainResult:
    """Wait until no liveness session is open, nothing is pending and no model has
    answered a request for ``quiet_s`` (so none is in execution), or the open sessions
    have had no request for ``idle_s``, or ``deadline_s`` passed, or ``interrupted``
    is set."""
    started = clock()
    last_requests, last_change = None, started
    last_answered, quiet_since = None, started
    while True:
        now = clock()
        load = read()
        if load is None:
            return DrainResult("no_metrics", now - started, 0.0)
        if load.answered != last_answered:
            if last_answered is not None:
                quiet_since = now
            last_answered = load.answered
        quiet = now - quiet_since >= quiet_s
        if load.open_sessions <= 0 and load.pending <= 0 and quiet:
            return DrainResult("drained", now - started, 0.0)
        if load.requests != last_requests:
            last_requests, last_change = load.requests, now
        elif now - last_change >= idle_s and load.pending <= 0 and quiet:
            return DrainResult("sessions_idle", now - started, load.open_sessions)
        if now - started >= deadline_s:
            return DrainResult("deadline", now - started, load.open_sessions)
        if interrupted is not None and interrupted.wait(poll_s):
            return DrainResult("interrupted", clock() - started, load.open_sessions)
        if interrupted is None:
            time.sleep(poll_s)
