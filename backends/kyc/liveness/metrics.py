"""Custom Prometheus metrics of ``liveness_sequence``, on Triton's metrics endpoint.

Published through the Python backend's metrics API (``pb_utils.MetricFamily``), so
they sit beside Triton's own ``nv_inference_*`` series on port 8002, labelled like
them with ``model`` and ``version``:

- ``kyc_liveness_sessions_started_total`` (counter): sessions started (START)
- ``kyc_liveness_sessions_ended_total{verdict="live"|"not_live"}`` (counter): END
- ``kyc_liveness_sessions_evicted_total`` (counter): sessions dropped idle for
  ``idle_ttl_s``; eviction runs at the start of each execute, so an idle session
  is counted when the next frame of any session arrives
- ``kyc_liveness_sessions_live`` (gauge): sessions held now
- ``kyc_liveness_sessions_abandoned_total{how="idle"|"restarted"}`` (counter):
  sessions that never reached END: evicted idle, or replaced by a new START of
  the same id
- ``kyc_liveness_sessions_refused_total{why="client"|"customer"}`` (counter):
  STARTs refused because that client or customer started too many sessions
  (``max_starts_per_client``, ``max_starts_per_customer``)

Every instance of the model registers the same families and labels, and Triton
merges them into one series each: the counters add up, and the gauge is moved by
each instance's change (never set), so that it holds the sessions of all instances;
an instance that closes takes its own sessions off it.

Counts only: no session id, challenge or verdict of a person. Without the metrics
API (unit tests, or if Triton refuses a family) every call is a no-op.
"""

from __future__ import annotations

from kyc.pipeline.metrics import COUNTER, GAUGE, ModelMetrics

PREFIX = "kyc_liveness_sessions"


class SessionMetrics:
    """The liveness counters and gauge of one model version."""

    def __init__(self, model: str, version: str, publish: bool = True) -> None:
        """``publish=False``: counted nowhere (run outside a server)."""
        self._live = 0  # this instance's share of the gauge
        labels = {"model": model, "version": version}
        self._metrics = ModelMetrics(PREFIX, publish)
        add = self._metrics.add
        add("started_total", COUNTER, "Liveness sessions started (START)",
            [("started", labels)])
        add("ended_total", COUNTER, "Liveness sessions ended (END), by verdict",
            [("live", {**labels, "verdict": "live"}),
             ("not_live", {**labels, "verdict": "not_live"})])
        add("evicted_total", COUNTER, "Liveness sessions dropped after idle_ttl_s without a "
            "frame", [("evicted", labels)])
        add("live", GAUGE, "Liveness sessions held now", [("live_now", labels)])
        add("abandoned_total", COUNTER, "Liveness sessions that never reached END",
            [("idle", {**labels, "how": "idle"}),
             ("restarted", {**labels, "how": "restarted"})])
        add("refused_total", COUNTER, "Liveness STARTs refused: too many from one client or "
            "customer", [("client", {**labels, "why": "client"}),
                         ("customer", {**labels, "why": "customer"})])

    def _get(self, key: str):
        return self._metrics.get(key)

    def started(self) -> None:
        self._get("started").increment(1)

    def ended(self, is_live: bool) -> None:
        self._get("live" if is_live else "not_live").increment(1)

    def evicted(self, count: int) -> None:
        if count:
            self._get("evicted").increment(count)
            self._get("idle").increment(count)

    def restarted(self) -> None:
        self._get("restarted").increment(1)

    def refused(self, why: str) -> None:
        """A START refused by a per-``why`` limit (``client`` or ``customer``)."""
        self._get(why).increment(1)

    def live(self, count: int) -> None:
        """This instance holds ``count`` sessions now (the gauge moves by the change)."""
        if count != self._live:
            self._get("live_now").increment(count - self._live)
            self._live = count

    def close(self) -> None:
        """Take this instance's sessions off the gauge, then drop the metrics before
        their families (the backend requires that order)."""
        self.live(0)
        self._metrics.close()
