"""`kyc bench --quick` as a user runs it: a real server, real photos and documents,
every scenario group swept, a JSON report with CSVs (perf_analyzer columns) and plots."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kyc_testing import PROJECT_ROOT, require_weights
from kyc_tools.dev.bench.report import PERF_ANALYZER_COLUMNS

pytestmark = pytest.mark.integration

KYC = [sys.executable, "-m", "kyc_tools.cli"]
SCENARIOS = ("kyc_ensemble", "kyc_in_process", "face_embedding_batching_on",
             "face_embedding_batching_off", "ocr_rec_batching_on", "ocr_rec_batching_off",
             "liveness_sequence", "liveness_sequence_under_ocr_load", "document_ocr",
             "document_peer_rapidocr")


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict[str, Any]:
    require_weights()
    path = tmp_path_factory.mktemp("bench") / "bench.json"
    result = subprocess.run([*KYC, "bench", "--quick", "--json", str(path)], cwd=PROJECT_ROOT,
                            capture_output=True, text=True, timeout=480)
    assert result.returncode == 0, result.stdout + result.stderr
    for name in SCENARIOS:
        assert name in result.stdout
    return json.loads(path.read_text())


def test_the_report_has_the_contract_keys_and_every_goal_measured(report):
    assert {"served_vs_inprocess_throughput", "dynamic_batching_speedup", "goals", "scenarios",
            "server_memory", "machine", "quick", "started_at"} <= set(report)
    assert report["quick"] is True
    assert set(report["scenarios"]) == set(SCENARIOS)
    for ratio in ("served_vs_inprocess_throughput", "dynamic_batching_speedup"):
        assert isinstance(report[ratio], float) and math.isfinite(report[ratio])
        assert report[ratio] > 0
    for name, goal in report["goals"].items():
        assert goal["value"] is not None and goal["met"] in (True, False), name
    assert report["goals"]["batching_gain_vs_ceiling"]["target"] == 0.95
    assert report["cpu_seconds_per_customer"] > 0


def test_every_level_answered_every_request_with_positive_figures(report):
    for name, figures in report["scenarios"].items():
        assert "skipped" not in figures, (name, figures)  # make test installs the peer
        assert figures["levels"], name
        for row in figures["levels"]:
            assert row["errors"] == 0, (name, row["concurrency"])
            assert row["per_s"] > 0 and row["requests"] > 0
            assert 0 < row["latency_ms"]["p50"] <= row["latency_ms"]["p95"] <= row[
                "latency_ms"]["p99"]


def test_served_levels_carry_each_models_queue_and_compute_times(report):
    for name, figures in report["scenarios"].items():
        if figures["kind"] != "served":
            continue
        for row in figures["levels"]:
            stats = row["model_stats"]
            assert set(stats) == set(figures["models"]), name
            assert stats[figures["models"][0]]["requests"] > 0
            assert row["server_us"]["compute_infer"] > 0, name


def test_batching_is_on_in_one_variant_and_off_in_the_other(report):
    for model in ("face_embedding", "ocr_rec"):
        on = report["scenarios"][f"{model}_batching_on"]["levels"][-1]["model_stats"][model]
        off = report["scenarios"][f"{model}_batching_off"]["levels"][-1]["model_stats"][model]
        assert on["executions"] < on["inferences"], model
        assert off["executions"] == off["inferences"], model


def test_the_end_to_end_scenarios_decide_every_customer(report):
    # served, perf_analyzer times the levels; each case was also sent once and scored
    checked = report["scenarios"]["kyc_ensemble"]["answers_checked"]
    rows = [checked, *report["scenarios"]["kyc_in_process"]["levels"]]
    assert checked["requests"] > 0 and checked["errors"] == 0
    for row in rows:
        assert row["requests_decided"] == row["requests"]
        assert "decision_approve" not in row  # no liveness token: never approved
        assert row["face_matched"] == row["requests"]  # same person on page and selfie


def test_perf_analyzer_loads_every_stateless_served_scenario(report):
    generators = report["settings"]["load_generators"]
    assert generators["perf_analyzer"] == "2.51.0"
    stateless = {"kyc_ensemble", "document_ocr", "face_embedding_batching_on",
                 "face_embedding_batching_off", "ocr_rec_batching_on", "ocr_rec_batching_off"}
    for name in stateless:
        assert generators["scenarios"][name] == "perf_analyzer", name
        level = report["scenarios"][name]["levels"][0]
        assert level["perf_analyzer_csv"].startswith("Concurrency,Inferences/Second"), name
    # the liveness client answers the random challenge: perf_analyzer cannot
    assert generators["scenarios"]["liveness_sequence"] != "perf_analyzer"


def test_liveness_sessions_end_live_alone_and_under_ocr_load(report):
    for name in ("liveness_sequence", "liveness_sequence_under_ocr_load"):
        for row in report["scenarios"][name]["levels"]:
            assert row["frames"] == row["requests"]
            assert row.get("sessions_live", 0) == row.get("sessions", 0), name
    loaded = report["scenarios"]["liveness_sequence_under_ocr_load"]["levels"][0]
    assert loaded["background"]["requests"] > 0 and loaded["background"]["errors"] == 0


def test_documents_are_scored_beside_the_peer(report):
    side = report["document_reading"]
    assert set(side) == {"document_ocr", "document_peer_rapidocr"}
    assert side["document_ocr"]["mrz_exact_rate"] >= 0.75
    for row in side.values():
        assert row["p50_ms"] > 0 and 0 <= row["mrz_exact_rate"] <= 1


def test_the_server_memory_counts_the_stub_processes(report):
    memory = report["server_memory"]
    assert memory["stub_processes"] >= 10 and memory["total_rss_mib"] > memory["server_rss_mib"]
    if os.geteuid() == 0:  # distinct pages: the stubs' shared libraries count once
        assert 0 < memory["resident_mib"] < memory["total_rss_mib"]
    instances = {row["instance"] for row in memory["stubs"]}
    assert {"ocr_det_0_0", "liveness_sequence_0_0"} <= instances
    assert len(instances) == memory["stub_processes"]


def test_the_first_request_after_a_publish_is_measured_with_and_without_warmup(report):
    first = report["first_request_after_publish"]
    assert set(first) == {"face_embedding", "ocr_rec"}
    for figs in first.values():
        assert figs["steady_ms"] > 0
        with_warmup, without = figs["with_warmup"], figs["without_warmup"]
        # Each switch published a new version, and the first request reached it.
        assert without["version"] == with_warmup["version"] + 1 >= 3
        assert with_warmup["first_ms"] > 0 and without["first_ms"] > 0
        assert with_warmup["load_s"] > 0


def test_a_csv_per_scenario_in_perf_analyzer_columns_and_two_plots(report):
    files = [Path(p) for p in report["files"]["csv"]]
    assert {p.stem for p in files} == set(SCENARIOS)
    for path in files:
        with path.open(newline="") as handle:
            rows = list(csv.reader(handle))
        assert tuple(rows[0]) == PERF_ANALYZER_COLUMNS
        assert len(rows) - 1 == len(report["scenarios"][path.stem]["levels"])
    plots = [Path(p) for p in report["files"]["plots"]]
    assert {p.name for p in plots} == {"throughput_latency.png", "stage_breakdown.png"}
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in plots)
