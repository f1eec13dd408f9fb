"""`kyc bench --quick` as a user runs it: real servers, real photos, a JSON report."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from kyc_testing import PROJECT_ROOT, require_weights

pytestmark = pytest.mark.integration

KYC = [sys.executable, "-m", "kyc.cli"]
SCENARIOS = ("face_served_batching_on", "face_served_batching_off", "face_in_process")
FACE_MODELS = ("face_preprocess", "face_detector", "face_embedding")


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict[str, Any]:
    require_weights()
    path = tmp_path_factory.mktemp("bench") / "bench.json"
    result = subprocess.run([*KYC, "bench", "--quick", "--json", str(path)], cwd=PROJECT_ROOT,
                            capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    for name in SCENARIOS:
        assert name in result.stdout
    return json.loads(path.read_text())


def numbers(figures: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    """Every numeric leaf of the figures, with its path."""
    if isinstance(figures, dict):
        for key, value in figures.items():
            yield from numbers(value, f"{where}.{key}")
    elif isinstance(figures, (int, float)) and not isinstance(figures, bool):
        yield where, figures


def test_the_report_has_the_contract_keys(report):
    assert {"served_vs_inprocess_throughput", "dynamic_batching_speedup", "scenarios",
            "machine", "quick", "started_at"} <= set(report)
    assert report["quick"] is True
    assert set(report["scenarios"]) == set(SCENARIOS)


def test_every_request_was_answered_and_every_figure_is_a_positive_finite_number(report):
    for ratio in ("served_vs_inprocess_throughput", "dynamic_batching_speedup"):
        assert isinstance(report[ratio], float) and math.isfinite(report[ratio])
        assert report[ratio] > 0
    for name, figures in report["scenarios"].items():
        assert figures["errors"] == 0, name
        assert figures["faces_found"] == figures["requests"], name
        assert set(figures["latency_ms"]) == {"p50", "p95", "p99"}
        for where, value in numbers(figures, name):
            if not where.endswith(".errors"):
                assert math.isfinite(value) and value > 0, (where, value)


def test_served_scenarios_report_the_counts_of_every_face_model(report):
    for variant in SCENARIOS[:2]:
        counts = report["scenarios"][variant]["model_counts"]
        assert set(counts) == set(FACE_MODELS)
        requests = report["scenarios"][variant]["requests"]
        assert counts["face_preprocess"]["inference_count"] == requests
        assert counts["face_embedding"]["inference_count"] == requests


def test_with_dynamic_batching_the_detector_runs_fewer_batches_than_images(report):
    counts = report["scenarios"]["face_served_batching_on"]["model_counts"]["face_detector"]
    assert counts["execution_count"] < counts["inference_count"]


def test_without_dynamic_batching_face_preprocess_runs_one_request_at_a_time(report):
    counts = report["scenarios"]["face_served_batching_off"]["model_counts"]["face_preprocess"]
    assert counts["execution_count"] == counts["inference_count"]
