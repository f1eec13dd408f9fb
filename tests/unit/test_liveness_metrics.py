"""liveness_sequence's custom metrics (kyc.liveness.metrics) over a fake metrics API;
tests/integration/test_prometheus.py reads the real ones from a real server."""

from __future__ import annotations

import sys
import types
from typing import ClassVar

import pytest

from kyc.liveness.metrics import SessionMetrics


class FakeMetric:
    def __init__(self, family, labels):
        self.family, self.labels, self.value = family, labels, 0.0

    def increment(self, value):
        assert self.family.kind == "GAUGE" or value >= 0
        self.value += value


class FakeFamily:
    """Triton's metrics API as the server behaves: a family registered again by another
    instance, with the same labels, is the same series."""

    COUNTER, GAUGE = "COUNTER", "GAUGE"
    made: ClassVar[list] = []

    def __init__(self, name, description, kind):
        self.name, self.description, self.kind = name, description, kind
        same = next((f for f in FakeFamily.made if f.name == name), None)
        self.metrics = same.metrics if same is not None else []
        FakeFamily.made.append(self)

    def Metric(self, labels):  # noqa: N802 (the backend's name)
        metric = next((m for m in self.metrics if m.labels == labels), None)
        if metric is None:
            metric = FakeMetric(self, labels)
            self.metrics.append(metric)
        return metric


@pytest.fixture
def families(monkeypatch):
    FakeFamily.made = []
    module = types.ModuleType("triton_python_backend_utils")
    module.MetricFamily = FakeFamily
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", module)
    return FakeFamily.made


def value(families, name, **labels):
    family = next(f for f in families if f.name == name)
    return next(m.value for m in family.metrics if labels.items() <= m.labels.items())


def test_sessions_are_counted_by_outcome_with_model_and_version_labels(families):
    metrics = SessionMetrics("liveness_sequence", "3")
    for _ in range(3):
        metrics.started()
    metrics.ended(True)
    metrics.ended(False)
    metrics.evicted(1)
    metrics.evicted(0)
    metrics.live(1)
    assert value(families, "kyc_liveness_sessions_started_total") == 3
    assert value(families, "kyc_liveness_sessions_ended_total", verdict="live") == 1
    assert value(families, "kyc_liveness_sessions_ended_total", verdict="not_live") == 1
    assert value(families, "kyc_liveness_sessions_evicted_total") == 1
    assert value(families, "kyc_liveness_sessions_live") == 1
    for family in families:
        for metric in family.metrics:
            assert metric.labels["model"] == "liveness_sequence" and metric.labels["version"] == "3"


def test_without_the_metrics_api_every_call_is_a_no_op(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", types.ModuleType("empty"))
    metrics = SessionMetrics("liveness_sequence", "1")
    metrics.started()
    metrics.ended(True)
    metrics.evicted(2)
    metrics.live(0)
    metrics.close()


def test_close_drops_the_metrics_before_their_families(families):
    metrics = SessionMetrics("liveness_sequence", "1")
    metrics.close()
    metrics.started()  # after close: nothing, no error
    assert metrics._metrics._metrics == {} and metrics._metrics._families == []


def test_the_gauge_holds_the_sessions_of_every_instance_and_an_instance_closing_leaves(
        families):
    first, second = (SessionMetrics("liveness_sequence", "1") for _ in range(2))
    first.live(3)
    second.live(2)
    first.live(1)
    assert value(families, "kyc_liveness_sessions_live") == 3
    second.close()
    assert value(families, "kyc_liveness_sessions_live") == 1
    first.started()
    second.started()  # closed: counts nothing
    assert value(families, "kyc_liveness_sessions_started_total") == 1
