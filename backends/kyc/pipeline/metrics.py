"""Custom Prometheus metrics of a Python model, on Triton's metrics endpoint.

Published through the Python backend's metrics API (``pb_utils.MetricFamily``), beside
Triton's own ``nv_inference_*`` series on port 8002. Every instance of a model
registers the same families and labels and Triton merges them into one series each.
Without the metrics API (unit tests, the in-process runtime, or a family Triton
refuses) every call is a no-op: a model never fails for its metrics.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

COUNTER, GAUGE = "counter", "gauge"


class _Null:
    def increment(self, value: float) -> None:
        pass

    def set(self, value: float) -> None:
        pass


class ModelMetrics:
    """Named metrics of families ``{prefix}_{suffix}``; :meth:`get` gives a metric by
    its key (a no-op one when not published)."""

    def __init__(self, prefix: str, publish: bool = True) -> None:
        self.prefix = prefix
        self._families: list[Any] = []
        self._metrics: dict[str, Any] = {}
        self._pb: Any = None
        if publish:
            try:
                import triton_python_backend_utils as pb

                self._pb = pb
            except ImportError:
                log.warning("%s metrics not published: no metrics API", prefix)

    def add(self, suffix: str, kind: str, description: str,
            metrics: list[tuple[str, dict[str, str]]]) -> None:
        """One family and its metrics, each (key, labels)."""
        if self._pb is None:
            return
        try:
            family = self._pb.MetricFamily
            created = family(name=f"{self.prefix}_{suffix}", description=description,
                             kind=family.COUNTER if kind == COUNTER else family.GAUGE)
            self._families.append(created)
            for key, labels in metrics:
                self._metrics[key] = created.Metric(labels=labels)
        except Exception as exc:  # never fail the model for its metrics
            log.warning("%s metrics not published: %s", self.prefix, type(exc).__name__)
            self._pb = None
            self.close()

    def get(self, key: str) -> Any:
        return self._metrics.get(key) or _Null()

    def close(self) -> None:
        """Drop the metrics before their families (the backend requires that order)."""
        self._metrics.clear()
        self._families.clear()
