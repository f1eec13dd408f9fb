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
DOCUMENT_SCENARIOS = ("document_served_batching_on", "document_served_batching_off",
                      "document_in_process", "document_peer_rapidocr")
KYC_SCENARIOS = ("kyc_served_batching_on", "kyc_served_batching_off")
FACE_MODELS = ("face_preprocess", "face_detector", "face_embedding")
DOCUMENT_MODELS = ("document_ocr", "ocr_preprocess", "ocr_det", "ocr_postprocess", "ocr_rec")
RATES = ("mrz_exact_rate", "fields_exact_rate", "field_accuracy", "valid_rate")


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict[str, Any]:
    require_weights()
    path = tmp_path_factory.mktemp("bench") / "bench.json"
    result = subprocess.run([*KYC, "bench", "--quick", "--json", str(path)], cwd=PROJECT_ROOT,
                            capture_output=True, text=True, timeout=480)
    assert result.returncode == 0, result.stdout + result.stderr
    for name in SCENARIOS + DOCUMENT_SCENARIOS + KYC_SCENARIOS:
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
    assert set(report["scenarios"]) == set(SCENARIOS + DOCUMENT_SCENARIOS + KYC_SCENARIOS)


def test_every_request_was_answered_and_every_figure_is_a_positive_finite_number(report):
    for ratio in ("served_vs_inprocess_throughput", "dynamic_batching_speedup"):
        assert isinstance(report[ratio], float) and math.isfinite(report[ratio])
        assert report[ratio] > 0
    for name, figures in report["scenarios"].items():
        assert "skipped" not in figures, (name, figures)  # make test installs the peer
        assert figures["errors"] == 0, name
        assert set(figures["latency_ms"]) == {"p50", "p95", "p99"}
        for where, value in numbers(figures, name):
            if where.endswith(".errors"):
                continue
            if where.rsplit(".", 1)[-1] in (*RATES, "mrz_found", "mrz_exact", "fields_exact",
                                            "fields_correct", "valid") or ".decision_" in where:
                assert math.isfinite(value) and value >= 0, (where, value)  # a peer may miss
            else:
                assert math.isfinite(value) and value > 0, (where, value)
    for name in SCENARIOS:
        assert report["scenarios"][name]["faces_found"] == report["scenarios"][name]["requests"]


def test_every_document_is_scored_and_ours_are_read_in_every_scenario(report):
    for name in DOCUMENT_SCENARIOS:
        figures = report["scenarios"][name]
        assert figures["documents"] == figures["requests"] > 0, name
        assert figures["fields_total"] >= 11 * figures["documents"]
        for rate in RATES:
            assert 0 <= figures[rate] <= 1, (name, rate)
    for name in DOCUMENT_SCENARIOS[:3]:  # ours: the MRZ is found on every rendered document
        assert report["scenarios"][name]["mrz_found"] == report["scenarios"][name]["documents"]


def test_the_report_puts_our_document_reading_beside_the_peers(report):
    side = report["document_reading"]
    assert set(side) == set(DOCUMENT_SCENARIOS)
    for name, row in side.items():
        assert row["per_s"] > 0 and row["p50_ms"] > 0, name
        assert set(RATES) <= set(row)
    # The latency a lone user sees: the served entry model timed alone; the peer runs
    # one document at a time anyway.
    assert side["document_served_batching_on"]["alone_p50_ms"] > 0
    assert side["document_peer_rapidocr"]["alone_p50_ms"] == side["document_peer_rapidocr"][
        "p50_ms"]


def test_served_document_scenarios_report_the_counts_of_every_document_model(report):
    for variant in DOCUMENT_SCENARIOS[:2]:
        counts = report["scenarios"][variant]["model_counts"]
        assert set(counts) == set(DOCUMENT_MODELS)
        requests = report["scenarios"][variant]["requests"]
        assert counts["document_ocr"]["inference_count"] == requests
        # every document has several text lines, recognised in batches
        rec = counts["ocr_rec"]
        assert rec["inference_count"] > 5 * requests and rec["execution_count"] < rec[
            "inference_count"]


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


def test_the_end_to_end_scenarios_decide_every_customer_and_time_one_alone(report):
    for name in KYC_SCENARIOS:
        figures = report["scenarios"][name]
        requests = figures["requests"]
        assert figures["requests_decided"] == requests, figures
        assert "decision_approve" not in figures  # no liveness token: never approved
        assert figures["face_matched"] == requests  # same person on page and selfie
        assert figures["model_counts"]["kyc_ensemble"]["inference_count"] == requests
        assert figures["model_counts"]["antifraud"]["inference_count"] == requests
    alone = report["scenarios"]["kyc_served_batching_on"]["alone"]
    assert alone["errors"] == 0 and alone["latency_ms"]["p50"] > 0
