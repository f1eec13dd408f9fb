"""``kyc_tools.dev.bench.report``: perf_analyzer-style CSVs and PNG charts of a bench report."""

from __future__ import annotations

import copy
import csv
import sys
from pathlib import Path

import pytest

from kyc_tools.dev.bench.report import (
    PERF_ANALYZER_COLUMNS,
    STAGES_PNG,
    THROUGHPUT_PNG,
    UNMEASURED_COLUMNS,
    write_csvs,
    write_plots,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SERVER_COLUMNS = ("Network+Server Send/Recv", "Server Queue", "Server Compute Input",
                  "Server Compute Infer", "Server Compute Output")


def _latency(p50, p90, p95, p99, avg):
    return {"p50": p50, "p90": p90, "p95": p95, "p99": p99, "avg": p50 if avg is None else avg}


def _model(requests, queue, infer):
    return {"requests": requests, "executions": max(1, requests // 4), "inferences": requests,
            "queue_us": queue, "compute_input_us": 40.0, "compute_infer_us": infer,
            "compute_output_us": 15.0}


def _served_level(concurrency, per_s, latency, server_us, errors=0):
    return {
        "concurrency": concurrency, "per_s": per_s, "requests": 200, "errors": errors,
        "seconds": 5.0, "latency_ms": latency, "server_us": server_us,
        "model_stats": {
            "kyc_ensemble": _model(200, 50.0 * concurrency, 9000.0),
            "face_detect": _model(200, 800.0 * concurrency, 4200.0),
            "face_embed": _model(200, 300.0 * concurrency, 2500.0),
        },
    }


def fake_report() -> dict:
    return {"scenarios": {
        "kyc_served": {
            "description": "the whole kyc ensemble, served",
            "kind": "served", "unit": "requests",
            "models": ["kyc_ensemble", "face_detect", "face_embed"],
            "steps": ["face_detect", "face_embed"],
            "levels": [
                _served_level(1, 95.5, _latency(10.2, 11.0, 12.345, 14.0, 10.5),
                              {"queue": 120.0, "compute_input": 80.0,
                               "compute_infer": 9000.0, "compute_output": 30.0}),
                _served_level(4, 240.25, _latency(16.0, 20.0, 22.5, 30.0, 16.8),
                              {"queue": 3000.0, "compute_input": 90.0,
                               "compute_infer": 9500.0, "compute_output": 35.0}, errors=3),
            ],
        },
        "face_in_process": {
            "description": "the face path without Triton",
            "kind": "in_process", "unit": "faces",
            "levels": [
                {"concurrency": 1, "per_s": 120.0, "requests": 100, "errors": 0,
                 "seconds": 0.83, "latency_ms": _latency(8.0, 8.5, 9.0, 9.5, 8.1),
                 "server_us": None, "model_stats": {}},
                {"concurrency": 8, "per_s": 410.0, "requests": 100, "errors": 0,
                 "seconds": 0.24, "latency_ms": _latency(19.0, 21.0, 23.0, 25.0, 19.5),
                 "server_us": None, "model_stats": {}},
            ],
        },
        "document_peer": {
            "description": "rapidocr on the same documents",
            "kind": "peer", "unit": "documents",
            "skipped": "rapidocr-onnxruntime is not installed",
        },
        "face_served": {
            "description": "faces, served, nothing answered",
            "kind": "served", "unit": "faces", "models": ["face_detect"],
            "levels": [
                {"concurrency": 2, "per_s": 0.0, "requests": 10, "errors": 10, "seconds": 1.0,
                 "latency_ms": {"p50": None, "p90": None, "p95": None, "p99": None, "avg": None},
                 "server_us": None},
            ],
        },
    }}


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as handle:
        header = next(csv.reader(handle))
    with path.open(newline="") as handle:
        return header, list(csv.DictReader(handle))


# -- CSV -------------------------------------------------------------------------------
def test_csv_columns_are_perf_analyzers_verbose_header_after_its_plain_one():
    # perf_analyzer docs/measurements_metrics.md, `-f perf.csv` without --verbose-csv
    plain = ("Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
             "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,"
             "p50 latency,p90 latency,p95 latency,p99 latency")
    # report_writer.cc adds these with --verbose-csv (Avg latency: no --percentile)
    verbose = ",Avg latency,request/response,response wait"
    assert ",".join(PERF_ANALYZER_COLUMNS) == plain + verbose


def test_write_csvs_writes_one_file_per_scenario_with_levels_and_none_for_skipped_ones(tmp_path):
    paths = write_csvs(fake_report(), tmp_path / "csv")
    assert [p.name for p in paths] == ["kyc_served.csv", "face_in_process.csv",
                                       "face_served.csv"]
    assert sorted(p.name for p in (tmp_path / "csv").iterdir()) == sorted(p.name for p in paths)


def test_every_csv_has_perf_analyzers_header_and_a_row_per_level(tmp_path):
    report = fake_report()
    for path in write_csvs(report, tmp_path):
        header, rows = read_csv(path)
        assert tuple(header) == PERF_ANALYZER_COLUMNS
        assert len(rows) == len(report["scenarios"][path.stem]["levels"])


def test_served_rows_carry_rate_latencies_and_server_times_in_microseconds(tmp_path):
    write_csvs(fake_report(), tmp_path)
    _, (first, second) = read_csv(tmp_path / "kyc_served.csv")
    assert first["Concurrency"] == "1"
    assert float(first["Inferences/Second"]) == pytest.approx(95.5)
    assert first["p50 latency"] == "10200"
    assert first["p95 latency"] == "12345"
    assert first["p99 latency"] == "14000"
    assert first["Avg latency"] == "10500"
    assert (first["Server Queue"], first["Server Compute Input"], first["Server Compute Infer"],
            first["Server Compute Output"]) == ("120", "80", "9000", "30")
    # average latency minus the four server columns: 10500 - 9230
    assert first["Network+Server Send/Recv"] == "1270"
    assert second["Concurrency"] == "4"
    assert float(second["Inferences/Second"]) == pytest.approx(240.25)


def test_unmeasured_columns_stay_empty_never_zero(tmp_path):
    for path in write_csvs(fake_report(), tmp_path):
        for row in read_csv(path)[1]:
            assert all(row[column] == "" for column in UNMEASURED_COLUMNS)


def test_in_process_rows_have_latencies_but_empty_server_cells(tmp_path):
    write_csvs(fake_report(), tmp_path)
    _, rows = read_csv(tmp_path / "face_in_process.csv")
    assert [row["p95 latency"] for row in rows] == ["9000", "23000"]
    assert all(row[column] == "" for row in rows for column in SERVER_COLUMNS)


def test_a_level_where_nothing_was_answered_is_written_with_empty_latencies(tmp_path):
    write_csvs(fake_report(), tmp_path)
    _, (row,) = read_csv(tmp_path / "face_served.csv")
    assert row["Concurrency"] == "2"
    assert float(row["Inferences/Second"]) == 0.0
    latency_columns = [c for c in PERF_ANALYZER_COLUMNS if c.endswith("latency")]
    assert all(row[column] == "" for column in latency_columns)
    assert all(row[column] == "" for column in SERVER_COLUMNS)


def test_network_column_is_floored_at_zero_when_server_time_exceeds_client_latency(tmp_path):
    report = fake_report()
    report["scenarios"]["kyc_served"]["levels"][0]["server_us"]["compute_infer"] = 50_000.0
    write_csvs(report, tmp_path)
    assert read_csv(tmp_path / "kyc_served.csv")[1][0]["Network+Server Send/Recv"] == "0"


def test_a_missing_server_stage_leaves_its_cell_and_the_network_cell_empty(tmp_path):
    report = fake_report()
    report["scenarios"]["kyc_served"]["levels"][0]["server_us"]["queue"] = None
    write_csvs(report, tmp_path)
    row = read_csv(tmp_path / "kyc_served.csv")[1][0]
    assert row["Server Queue"] == "" and row["Network+Server Send/Recv"] == ""
    assert row["Server Compute Infer"] == "9000"


def test_a_scenario_name_with_a_path_separator_stays_inside_the_directory(tmp_path):
    report = {"scenarios": {"../up/face": copy.deepcopy(fake_report()["scenarios"]
                                                           ["face_in_process"])}}
    (path,) = write_csvs(report, tmp_path)
    assert path.parent == tmp_path


def test_a_report_without_scenarios_writes_no_csv(tmp_path):
    assert write_csvs({"scenarios": {}}, tmp_path) == []
    assert write_csvs({}, tmp_path) == []


# -- plots -----------------------------------------------------------------------------
def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 10_000


def test_write_plots_writes_both_charts_as_png(tmp_path):
    pytest.importorskip("matplotlib")
    result = write_plots(fake_report(), tmp_path / "plots")
    assert result["skipped"] is None
    assert [p.name for p in result["files"]] == [THROUGHPUT_PNG, STAGES_PNG]
    for path in result["files"]:
        assert_png(path)


def test_without_served_model_statistics_only_the_throughput_chart_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    report = fake_report()
    for name in ("kyc_served", "face_served"):
        del report["scenarios"][name]
    result = write_plots(report, tmp_path)
    assert [p.name for p in result["files"]] == [THROUGHPUT_PNG]
    assert STAGES_PNG in result["skipped"]
    assert not (tmp_path / STAGES_PNG).exists()


def test_a_report_of_skipped_scenarios_gets_no_plots_and_a_reason(tmp_path):
    pytest.importorskip("matplotlib")
    report = {"scenarios": {"document_peer": fake_report()["scenarios"]["document_peer"]}}
    result = write_plots(report, tmp_path / "plots")
    assert result["files"] == []
    assert THROUGHPUT_PNG in result["skipped"] and STAGES_PNG in result["skipped"]
    assert not (tmp_path / "plots").exists()


def test_write_plots_without_matplotlib_is_skipped_with_a_reason_and_writes_nothing(
        tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = write_plots(fake_report(), tmp_path / "plots")
    assert result["files"] == []
    assert "matplotlib" in result["skipped"]
    assert not (tmp_path / "plots").exists()
