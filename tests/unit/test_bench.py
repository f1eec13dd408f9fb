"""``kyc bench``: the pure pieces (config transform, repository copy, load, figures, report)."""

from __future__ import annotations

import importlib.util
import json
import math
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from kyc import bench
from kyc.bench import (
    BenchOptions,
    Measurement,
    copy_repository,
    count_deltas,
    disable_dynamic_batching,
    drive_batches,
    drive_clients,
    figures,
    format_table,
    percentile,
    remove_dynamic_batching,
    stats_counts,
    summarize,
)
from kyc.cli import build_parser
from kyc.repo.config import parse_config
from kyc_testing import SHIPPED_REPOSITORY

SHIPPED_CONFIGS = sorted(SHIPPED_REPOSITORY.glob("*/config.pbtxt"))


# -- config transform ------------------------------------------------------------------
@pytest.mark.parametrize("path", SHIPPED_CONFIGS, ids=[p.parent.name for p in SHIPPED_CONFIGS])
def test_removing_dynamic_batching_from_a_shipped_config_changes_nothing_else(path):
    original = parse_config(path.read_text())
    transformed = parse_config(remove_dynamic_batching(path.read_text()))
    assert not transformed.HasField("dynamic_batching")
    original.ClearField("dynamic_batching")
    assert transformed == original


NESTED = """\
name: "m"  # dynamic_batching { in a comment stays
max_batch_size: 8
parameters [ { key: "note" value: { string_value: "dynamic_batching { }" } } ]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  priority_levels: 2
  default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 100 }
  priority_queue_policy { key: 1 value: { max_queue_size: 4 } }
}
input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""


def test_removing_dynamic_batching_takes_nested_blocks_and_keeps_comments_and_strings():
    text = remove_dynamic_batching(NESTED)
    config = parse_config(text)
    assert not config.HasField("dynamic_batching")
    assert "# dynamic_batching { in a comment stays" in text
    assert config.parameters["note"].string_value == "dynamic_batching { }"
    assert config.input[0].name == "X"
    assert "priority_levels" not in text and "\n\n" not in text


@pytest.mark.parametrize("block", ["dynamic_batching { }", "dynamic_batching: {}",
                                   "dynamic_batching {max_queue_delay_microseconds: 5}"])
def test_removing_dynamic_batching_understands_its_spellings_on_a_shared_line(block):
    text = remove_dynamic_batching(f'name: "m" {block} max_batch_size: 4\n')
    config = parse_config(text)
    assert not config.HasField("dynamic_batching") and config.max_batch_size == 4


def test_a_config_without_dynamic_batching_is_left_as_it_is():
    text = 'name: "m"\nsequence_batching { max_sequence_idle_microseconds: 5 }\n'
    assert remove_dynamic_batching(text) == text


def test_only_a_top_level_dynamic_batching_block_is_removed():
    text = 'outer {\n  dynamic_batching { }\n}\ndynamic_batching { }\n'
    assert remove_dynamic_batching(text) == 'outer {\n  dynamic_batching { }\n}\n'


def test_unbalanced_braces_are_refused():
    with pytest.raises(ValueError, match="unbalanced"):
        remove_dynamic_batching("dynamic_batching { \n")


# -- repository copy -------------------------------------------------------------------
def test_the_repository_copy_copies_configs_and_symlinks_everything_else(tiny_repository, tmp_path):
    (tiny_repository / "echo" / "1" / "__pycache__").mkdir()
    (tiny_repository / "echo" / "1" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"")
    (tiny_repository / ".staging-echo").mkdir()
    copy = copy_repository(tiny_repository, tmp_path / "copy")
    assert sorted(p.name for p in copy.iterdir()) == ["double", "echo", "pipe"]
    config = copy / "echo" / "config.pbtxt"
    assert config.is_file() and not config.is_symlink()
    model = copy / "echo" / "1" / "model.py"
    assert model.is_symlink() and model.resolve() == (tiny_repository / "echo/1/model.py").resolve()
    assert (copy / "double" / "1" / "model.onnx").is_symlink()
    assert (copy / "pipe").is_dir()
    (compiled,) = (copy / "echo" / "1" / "__pycache__").iterdir()  # compiled in the copy
    assert compiled.name == Path(importlib.util.cache_from_source(str(model))).name
    assert not compiled.is_symlink() and compiled.stat().st_size > 0
    assert not (copy / ".staging-echo").exists()


def test_the_repository_copy_can_be_limited_to_some_models(tiny_repository, tmp_path):
    copy = copy_repository(tiny_repository, tmp_path / "copy", models=["double"])
    assert [p.name for p in copy.iterdir()] == ["double"]


def test_disabling_dynamic_batching_edits_the_copy_and_not_the_source(tiny_repository, tmp_path):
    source_text = (tiny_repository / "double" / "config.pbtxt").read_text()
    copy = copy_repository(tiny_repository, tmp_path / "copy")
    disable_dynamic_batching(copy, ["double"])
    assert "dynamic_batching" not in (copy / "double" / "config.pbtxt").read_text()
    assert (tiny_repository / "double" / "config.pbtxt").read_text() == source_text


# -- load drivers ------------------------------------------------------------------------
class FakeClient:
    """Answers after a short sleep; payload b"bad" fails, b"none" has no face."""

    in_flight = 0
    most = 0
    lock = threading.Lock()
    closed = 0

    def __call__(self, payload: bytes) -> bool:
        with FakeClient.lock:
            FakeClient.in_flight += 1
            FakeClient.most = max(FakeClient.most, FakeClient.in_flight)
        time.sleep(0.005)
        with FakeClient.lock:
            FakeClient.in_flight -= 1
        if payload == b"bad":
            raise RuntimeError("refused")
        return {"faces_found": int(payload != b"none")}

    def close(self) -> None:
        with FakeClient.lock:
            FakeClient.closed += 1


def test_the_clients_send_exactly_the_requests_asked_with_that_many_in_flight():
    FakeClient.most = FakeClient.closed = 0
    measurement = drive_clients(FakeClient, [b"a", b"bad", b"none", b"b"], 40, 4)
    assert measurement.requests == 40 and measurement.errors == 10
    assert measurement.tallies == {"faces_found": 20} and len(measurement.latencies_s) == 30
    assert FakeClient.most == 4 and FakeClient.closed == 4
    assert measurement.seconds > 0 and all(t > 0 for t in measurement.latencies_s)


class FakeRunner:
    max_batch = 8

    def __init__(self) -> None:
        self.batches: list[int] = []

    def __call__(self, payloads):
        self.batches.append(len(payloads))
        return [RuntimeError("bad") if p == b"bad" else {"faces_found": int(p != b"none")}
                for p in payloads]

    def settings(self) -> dict:
        return {}


@pytest.mark.parametrize(("concurrency", "batches"), [(3, [3, 3, 3, 1]), (16, [8, 2])])
def test_in_process_batches_are_the_concurrency_capped_at_the_max_batch(concurrency, batches):
    runner = FakeRunner()
    measurement = drive_batches(runner, [b"a", b"none", b"bad"], 10, concurrency)
    assert runner.batches == batches
    assert measurement.requests == 10 and measurement.concurrency == concurrency


def test_a_failing_in_process_batch_counts_an_error_per_request():
    class Broken(FakeRunner):
        def __call__(self, payloads):
            raise RuntimeError("down")

    measurement = drive_batches(Broken(), [b"a"], 5, 2)
    assert measurement.errors == 5 and measurement.latencies_s == []


# -- figures ---------------------------------------------------------------------------
def test_percentiles_interpolate_linearly_and_are_nan_for_nothing():
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile([3.0], 95) == 3.0
    assert math.isnan(percentile([], 50))


def test_figures_count_only_answered_requests_as_faces_per_second():
    measurement = Measurement(concurrency=2, seconds=2.0, latencies_s=[0.1, 0.2, 0.3, 0.4],
                              errors=1, tallies={"faces_found": 3})
    figs = figures(measurement)
    assert figs["faces_per_s"] == 2.0
    assert figs["latency_ms"] == {"p50": 250.0, "p95": 385.0, "p99": 397.0}
    assert (figs["requests"], figs["errors"], figs["faces_found"]) == (5, 1, 3)
    assert figs["concurrency"] == 2


def test_a_window_without_answers_has_no_latencies_and_still_makes_valid_json(tmp_path):
    figs = figures(Measurement(concurrency=1, seconds=1.0, errors=3))
    assert figs["latency_ms"] == {"p50": None, "p95": None, "p99": None}
    assert figs["faces_per_s"] == 0.0 and figs["errors"] == 3
    report = fake_report()
    report["scenarios"]["face_in_process"].update(figs)
    bench.write_json(report, tmp_path / "bench.json")
    assert "face_in_process" in format_table(report)


def test_statistics_counts_are_summed_over_versions_and_taken_as_deltas():
    stats = {"model_stats": [{"name": "m", "version": "1", "execution_count": "3",
                              "inference_count": "7"},
                             {"name": "m", "version": "2", "execution_count": "1"}]}
    assert stats_counts(stats) == {"execution_count": 4, "inference_count": 7}
    assert stats_counts({}) == {"execution_count": 0, "inference_count": 0}
    before = {"m": {"execution_count": 4, "inference_count": 7}}
    after = {"m": {"execution_count": 10, "inference_count": 31}}
    assert count_deltas(before, after) == {"m": {"execution_count": 6, "inference_count": 24}}


def test_statistics_that_went_back_are_reported_as_a_reload(caplog):
    before = {"m": {"execution_count": 4, "inference_count": 8}}
    after = {"m": {"execution_count": 1, "inference_count": 2}}
    count_deltas(before, after)
    assert "reloaded" in caplog.text


# -- the report ----------------------------------------------------------------------------
def fake_scenario(faces_per_s: float, counts: bool = True) -> dict:
    figs = {"description": "d", "unit": "faces", "faces_per_s": faces_per_s,
            "latency_ms": {"p50": 10.0, "p95": 20.0, "p99": 30.0}, "requests": 8, "errors": 0,
            "faces_found": 8, "concurrency": 2, "seconds": 1.0}
    if counts:
        figs["model_counts"] = {"face_detector": {"execution_count": 3, "inference_count": 8}}
    return figs


def fake_report(on: float = 12.0, off: float = 8.0, in_process: float = 6.0) -> dict:
    scenarios = {"face_served_batching_on": fake_scenario(on),
                 "face_served_batching_off": fake_scenario(off),
                 "face_in_process": fake_scenario(in_process, counts=False)}
    return summarize(scenarios, BenchOptions(quick=True),
                     datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc), bench.machine())


def test_the_report_has_the_contract_keys_and_the_two_ratios():
    report = fake_report()
    assert report["served_vs_inprocess_throughput"] == 2.0
    assert report["dynamic_batching_speedup"] == 1.5
    assert set(report) >= {"scenarios", "machine", "quick", "started_at", "compared"}
    assert {"cpu_count", "python", "platform"} <= set(report["machine"])
    assert report["quick"] is True and report["started_at"] == "2024-01-02T03:04:05+00:00"
    assert json.loads(json.dumps(report, allow_nan=False)) == report


def test_a_ratio_over_a_scenario_without_throughput_is_null_not_infinite():
    report = fake_report(in_process=0.0)
    assert report["served_vs_inprocess_throughput"] is None


def test_the_report_file_and_table_carry_figures_only(tmp_path):
    report = fake_report()
    bench.write_json(report, tmp_path / "bench.json")
    assert json.loads((tmp_path / "bench.json").read_text()) == report
    table = format_table(report)
    for name in report["scenarios"]:
        assert name in table
    assert "8 inferences in 3 executions" in table


# -- options -------------------------------------------------------------------------------
def test_quick_options_are_smaller_than_the_full_run_and_explicit_values_win():
    quick, full = BenchOptions.for_run(quick=True), BenchOptions.for_run(quick=False)
    assert quick.requests < full.requests and quick.concurrency <= full.concurrency
    assert quick.quick and not full.quick
    mine = BenchOptions.for_run(quick=True, requests=5, concurrency=16,
                                model_repository=Path("x"))
    assert (mine.requests, mine.concurrency, mine.model_repository) == (5, 16, Path("x"))
    assert mine.warmup_requests >= 16


def test_the_bench_command_parses_its_options(tmp_path):
    args = build_parser().parse_args(["bench", "--quick", "--json", str(tmp_path / "b.json"),
                                      "--concurrency", "3", "--requests", "30"])
    assert args.quick and args.json == tmp_path / "b.json"
    assert (args.concurrency, args.requests) == (3, 30)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--concurrency", "0"])


def test_bench_refuses_a_repository_without_weights(tmp_path):
    (tmp_path / "face_detector").mkdir()
    (tmp_path / "face_detector" / "config.pbtxt").write_text('platform: "onnxruntime_onnx"')
    with pytest.raises(bench.BenchError, match="make setup"):
        bench.check_weights(tmp_path, ["face_detector"])


def test_an_ensemble_needs_no_weights_of_its_own(tmp_path):
    (tmp_path / "document_ocr" / "1").mkdir(parents=True)
    (tmp_path / "document_ocr" / "config.pbtxt").write_text('platform: "ensemble"')
    bench.check_weights(tmp_path, ["document_ocr"])


def test_unknown_workloads_are_refused_by_name():
    with pytest.raises(bench.BenchError, match="nope"):
        bench.selected_workloads(["nope"])
    assert [w.name for w in bench.selected_workloads(["face"])] == ["face"]
    assert [w.name for w in bench.selected_workloads([])] == list(bench.WORKLOADS)


# -- workloads of different cost, scored workloads, peers ------------------------------------
def test_a_costly_workload_runs_fewer_requests_but_one_per_client_at_least():
    options = BenchOptions(requests=320, concurrency=8, warmup_requests=32)
    assert options.scaled(1.0) is options
    scaled = options.scaled(8.0)
    assert (scaled.requests, scaled.warmup_requests, scaled.concurrency) == (40, 8, 8)
    tiny = BenchOptions(requests=10, concurrency=4, warmup_requests=4).scaled(8.0)
    assert (tiny.requests, tiny.warmup_requests) == (4, 4)


def test_tallies_are_summed_and_rated_in_the_unit_of_the_workload():
    measurement = Measurement(concurrency=1, seconds=4.0)
    measurement.record({"documents": 1, "mrz_exact": 1}, 0.5)
    measurement.record({"documents": 1, "mrz_exact": 0}, 1.5)
    measurement.record(RuntimeError("x"), 0.1)

    def quality(tallies):
        return {"mrz_exact_rate": tallies["mrz_exact"] / tallies["documents"]}

    figs = figures(measurement, "documents", quality)
    assert figs["unit"] == "documents" and figs["documents_per_s"] == 0.5
    assert (figs["documents"], figs["mrz_exact"], figs["mrz_exact_rate"]) == (2, 1, 0.5)
    assert figs["errors"] == 1 and "faces_per_s" not in figs


class Scored:
    max_batch = 1

    def __init__(self, repository):
        self.calls = 0

    def __call__(self, payloads):
        self.calls += len(payloads)
        return [{"documents": 1, "mrz_exact": int(p == b"good"), "fields_exact": 0,
                 "fields_correct": 0, "fields_total": 1, "valid": 0} for p in payloads]

    def settings(self):
        return {}


def missing_peer(repository):
    raise bench.PeerUnavailableError("not installed here")


def document_like_workload() -> bench.Workload:
    from kyc.document.evaluation import rates

    return bench.Workload(name="document", description="d", models=(), payloads=lambda n: [],
                          served=None, in_process=Scored, unit="documents", cost=2.0,
                          quality=rates,
                          peers={"there": ("a peer", Scored), "gone": ("gone", missing_peer)})


def test_peers_run_like_the_in_process_scenario_and_a_missing_one_is_skipped():
    options = BenchOptions(requests=8, concurrency=2, warmup_requests=2)
    results = bench.run_in_process([document_like_workload()],
                                   {"document": [b"good", b"bad"]}, options)
    assert set(results) == {"document_in_process", "document_peer_there", "document_peer_gone"}
    assert results["document_peer_gone"]["skipped"] == "not installed here"
    there = results["document_peer_there"]
    assert there["description"] == "a peer" and there["requests"] == 4  # 8 / cost 2
    assert there["mrz_exact_rate"] == 0.5 and there["batch_size"] == 1


def test_the_report_puts_our_document_reading_and_the_peers_side_by_side(tmp_path):
    options = BenchOptions(requests=8, concurrency=2, warmup_requests=2)
    scenarios = bench.run_in_process([document_like_workload()],
                                     {"document": [b"good", b"good", b"bad", b"good"]}, options)
    report = summarize(scenarios, options, datetime(2024, 1, 2, tzinfo=timezone.utc),
                       bench.machine())
    assert report["served_vs_inprocess_throughput"] is None  # no face workload run
    side = report["document_reading"]
    assert side["document_in_process"]["mrz_exact_rate"] == 0.75
    assert side["document_peer_there"]["per_s"] > 0
    assert side["document_peer_gone"] == {"skipped": "not installed here"}
    bench.write_json(report, tmp_path / "bench.json")
    table = format_table(report)
    assert "skipped: not installed here" in table and "75.0%" in table


def test_the_bench_command_offers_exactly_the_registered_workloads():
    args = build_parser().parse_args(["bench", "--workload", "document", "--workload", "face"])
    assert args.workload == ["document", "face"]
    (action,) = [a for sub in build_parser()._subparsers._group_actions
                 for name, p in sub.choices.items() if name == "bench"
                 for a in p._actions if a.dest == "workload"]
    assert set(action.choices) == set(bench.WORKLOADS)
