"""``kyc bench``: the pure pieces (repository copy, load loops, statistics, report)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest

from kyc_testing import SHIPPED_REPOSITORY
from kyc_tools import cli
from kyc_tools.cli import build_parser
from kyc_tools.dev.bench.measure import (
    Measurement,
    level_figures,
    measure_batches,
    measure_level,
    percentile,
)
from kyc_tools.dev.bench.models import check_weights, copy_repository, pipeline_steps
from kyc_tools.dev.bench.options import GROUPS, BenchError, BenchOptions, Window
from kyc_tools.dev.bench.stats import (
    STAGES,
    model_stats,
    process_memory,
    server_times,
    stats_totals,
)
from kyc_tools.dev.bench.summary import format_table, machine, summarize, write_json

TINY = Window(warmup_s=0.05, window_s=0.2, min_requests=5, max_s=2.0)


# -- repository copy -------------------------------------------------------------------
def test_the_repository_copy_copies_configs_and_hard_links_everything_else(tiny_repository,
                                                                          tmp_path):
    """Hard links, not symbolic ones: the live copy and `kyc repo publish` refuse links."""
    (tiny_repository / "echo" / "1" / "__pycache__").mkdir()
    (tiny_repository / "echo" / "1" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"")
    (tiny_repository / ".staging-echo").mkdir()
    copy = copy_repository(tiny_repository, tmp_path / "copy")
    assert sorted(p.name for p in copy.iterdir()) == ["double", "echo", "pipe"]
    config = copy / "echo" / "config.pbtxt"
    assert config.is_file() and not config.is_symlink()
    model = copy / "echo" / "1" / "model.py"
    original = tiny_repository / "echo" / "1" / "model.py"
    assert not model.is_symlink() and model.read_bytes() == original.read_bytes()
    assert model.stat().st_ino == original.stat().st_ino  # the same file, not a copy
    assert not (copy / "double" / "1" / "model.onnx").is_symlink()
    assert (copy / "pipe").is_dir()
    (compiled,) = (copy / "echo" / "1" / "__pycache__").iterdir()  # compiled in the copy
    assert compiled.name == Path(importlib.util.cache_from_source(str(model))).name
    assert not compiled.is_symlink() and compiled.stat().st_size > 0
    assert not (copy / ".staging-echo").exists()


def test_the_repository_copy_can_be_limited_to_some_models(tiny_repository, tmp_path):
    copy = copy_repository(tiny_repository, tmp_path / "copy", models=["double"])
    assert [p.name for p in copy.iterdir()] == ["double"]


# -- load loops ------------------------------------------------------------------------
class FakeClient:
    """Answers after a short sleep; every third request fails."""

    in_flight = most = closed = 0

    def __init__(self, k: int) -> None:
        self.calls = 0

    async def next(self):
        FakeClient.in_flight += 1
        FakeClient.most = max(FakeClient.most, FakeClient.in_flight)
        await asyncio.sleep(0.005)
        FakeClient.in_flight -= 1
        self.calls += 1
        if self.calls % 3 == 0:
            raise RuntimeError("refused")
        return {"faces": 1}

    async def close(self):
        FakeClient.closed += 1


def test_a_level_keeps_that_many_clients_in_flight_and_counts_only_the_window():
    FakeClient.most = FakeClient.closed = 0
    reads = []

    async def stats():
        reads.append(len(reads))
        return {"m": {"requests": len(reads)}}

    level = asyncio.run(measure_level(FakeClient, 4, TINY, stats))
    m = level.measurement
    assert FakeClient.most == 4 and FakeClient.closed == 4
    assert m.requests >= TINY.min_requests and m.seconds >= TINY.window_s
    assert m.errors > 0 and m.tallies["faces"] == len(m.latencies_s)
    assert all(t > 0 for t in m.latencies_s)
    assert level.stats_before == {"m": {"requests": 1}} and level.stats_after == {
        "m": {"requests": 2}}


def test_a_level_ends_by_letting_every_request_in_flight_finish_not_by_cancelling_it():
    FakeClient.in_flight = 0
    level = asyncio.run(measure_level(FakeClient, 4, TINY))
    assert level.measurement.requests > 0
    assert FakeClient.in_flight == 0  # a cancelled request would leave its count up


def test_background_clients_load_the_level_and_are_counted_apart():
    level = asyncio.run(measure_level(FakeClient, 2, TINY,
                                      background=[FakeClient(9), FakeClient(10)]))
    assert level.background is not None and level.background.concurrency == 2
    assert level.background.requests > 0 and level.measurement.concurrency == 2


class FakeRunner:
    max_batch = 8

    def __init__(self) -> None:
        self.batches: list[int] = []

    def __call__(self, payloads):
        self.batches.append(len(payloads))
        return [RuntimeError("bad") if p == b"bad" else {"faces": 1} for p in payloads]

    def settings(self) -> dict:
        return {}


@pytest.mark.parametrize(("concurrency", "size"), [(3, 3), (16, 8)])
def test_in_process_batches_are_the_concurrency_capped_at_the_max_batch(concurrency, size):
    runner = FakeRunner()
    m = measure_batches(runner, [b"a", b"bad", b"c"], concurrency, TINY)
    assert set(runner.batches) == {size} and m.requests >= TINY.min_requests
    assert m.errors > 0 and m.concurrency == concurrency


def test_a_failing_in_process_batch_counts_an_error_per_request():
    class Broken(FakeRunner):
        def __call__(self, payloads):
            raise RuntimeError("down")

    m = measure_batches(Broken(), [b"a"], 2, TINY)
    assert m.errors == m.requests > 0 and m.latencies_s == []


# -- figures -------------------------------------------------------------------------------
def test_percentiles_interpolate_linearly_and_are_nan_for_nothing():
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 99) == pytest.approx(99.01)
    assert math.isnan(percentile([], 50))


def test_level_figures_count_only_answered_requests():
    m = Measurement(concurrency=2, seconds=2.0, latencies_s=[0.1, 0.2, 0.3, 0.4], errors=1,
                    tallies={"faces": 4})
    figs = level_figures(m)
    assert figs["per_s"] == 2.0 and figs["requests"] == 5 and figs["errors"] == 1
    assert figs["latency_ms"]["p50"] == 250.0 and figs["latency_ms"]["avg"] == 250.0
    empty = level_figures(Measurement(concurrency=1, seconds=1.0, errors=3))
    assert set(empty["latency_ms"].values()) == {None} and empty["per_s"] == 0.0


def stats_json(requests, executions, ns):
    stage = {"count": str(requests), "ns": str(ns)}
    return {"model_stats": [{"execution_count": str(executions), "inference_count": str(requests),
                             "inference_stats": {"success": stage, "queue": stage,
                                                 "compute_input": stage, "compute_infer": stage,
                                                 "compute_output": stage}}]}


def test_statistics_become_per_request_stage_times_over_the_window():
    before = {"e": stats_totals(stats_json(10, 10, 1000)), "s": stats_totals(stats_json(0, 0, 0))}
    after = {"e": stats_totals(stats_json(20, 15, 21000)),
             "s": stats_totals(stats_json(40, 5, 4000000))}
    figs = model_stats(before, after)
    assert figs["e"] == {"requests": 10, "executions": 5, "inferences": 10, "queue_us": 2.0,
                         "compute_input_us": 2.0, "compute_infer_us": 2.0,
                         "compute_output_us": 2.0}
    # per request of the entry model: the steps' time summed, over 10 entry requests
    assert server_times(before, after, "e", ["s"]) == {s: 400.0 for s in STAGES}
    assert server_times(after, after, "e", ["s"]) is None  # nothing answered
    assert stats_totals({})["requests"] == 0


def test_an_ensemble_is_timed_by_its_steps_and_a_model_by_itself():
    assert pipeline_steps(SHIPPED_REPOSITORY, "document_ocr") == [
        "kyc_intake", "ocr_preprocess", "ocr_det", "ocr_postprocess"]
    assert pipeline_steps(SHIPPED_REPOSITORY, "kyc_ensemble") == [
        "kyc_intake", "face_preprocess", "ocr_preprocess", "ocr_det", "ocr_fields",
        "kyc_decision"]  # face_embedding: inside kyc_decision (BLS, the attested faces)
    assert pipeline_steps(SHIPPED_REPOSITORY, "face_embedding") == ["face_embedding"]


def test_the_memory_of_a_process_tree_is_read_from_proc():
    memory = process_memory(os.getpid())
    assert memory["server_rss_mib"] > 0 and memory["total_rss_mib"] >= memory["server_rss_mib"]
    if os.geteuid() == 0:  # page frame numbers are readable by root only
        # read a moment after the RSS, from a process that may have grown meanwhile
        # (measured once: 2.2 MiB over)
        assert 0 < memory["resident_mib"] <= memory["total_rss_mib"] * 1.05 + 1


# -- the report ----------------------------------------------------------------------------
def level(concurrency, per_s, p50=10.0, p95=20.0, **extra):
    return {"concurrency": concurrency, "per_s": per_s, "requests": 8, "errors": 0,
            "seconds": 1.0, "latency_ms": {"p50": p50, "p90": p95, "p95": p95, "p99": p95,
                                           "avg": p50}, "server_us": None, "model_stats": {},
            **extra}


def fake_scenarios():
    return {
        "kyc_ensemble": {"unit": "requests", "levels": [level(1, 1.0, 800, 900),
                                                        level(4, 1.6)]},
        "kyc_in_process": {"unit": "requests", "levels": [level(1, 1.2), level(4, 2.0)]},
        "face_embedding_batching_on": {"unit": "faces", "levels": [level(16, 30.0)]},
        "face_embedding_batching_off": {"unit": "faces", "levels": [level(16, 20.0)]},
        "liveness_sequence": {"unit": "frames", "levels": [level(8, 9.0, 100, 160)]},
        "document_ocr": {"unit": "documents", "levels": [level(1, 1.0, 900, mrz_exact_rate=1.0)]},
        "document_peer_rapidocr": {"unit": "documents", "skipped": "not installed here"},
    }


def fake_report():
    return summarize(fake_scenarios(), BenchOptions(quick=True),
                     datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc), machine(),
                     {"total_rss_mib": 1000.0, "total_pss_mib": 800.0, "stub_processes": 3})


def test_the_report_has_the_contract_keys_and_every_goal_judged():
    report = fake_report()
    assert report["served_vs_inprocess_throughput"] == 0.8
    assert report["dynamic_batching_speedup"] == 1.5
    goals = report["goals"]
    assert goals["kyc_ensemble_p95_ms_at_1"] == {**goals["kyc_ensemble_p95_ms_at_1"],
                                                 "value": 900, "target": 500.0, "met": False}
    assert goals["kyc_ensemble_best_per_s"]["target"] == 2.0
    assert goals["served_vs_inprocess_throughput"]["target"] == 0.95
    assert goals["liveness_p95_ms_at_8"]["met"] is False
    assert goals["document_latency_vs_peer"]["met"] is None  # the peer was skipped
    assert goals["server_memory_resident_mib"]["met"] is True
    assert report["document_reading"]["document_peer_rapidocr"] == {
        "skipped": "not installed here"}


def test_the_report_file_and_table_carry_figures_only(tmp_path):
    report = fake_report()
    write_json(report, tmp_path / "bench.json")
    assert json.loads((tmp_path / "bench.json").read_text()) == report
    table = format_table(report)
    assert "kyc_ensemble" in table and "NOT met" in table and "not measured" in table
    assert "skipped: not installed here" in table


def test_figures_that_are_not_sweeps_go_into_the_report_and_the_table():
    publish = {"steady_ms": 20.0, "with_warmup": {"first_ms": 21.5},
               "without_warmup": {"first_ms": 95.0}}
    extra = {"first_request_after_publish": {"face_embedding": publish},
             "batching_ceiling_in_process": {"face_embedding": {
                 "ms_per_item_batch_1": 19.0, "ms_per_item_batch_16": 18.0, "ceiling": 1.056}}}
    report = summarize(fake_scenarios(), BenchOptions(quick=True),
                       datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc), machine(),
                       None, extra)
    assert report["first_request_after_publish"]["face_embedding"] == publish
    # the served gain (1.5 in the fake sweep) over onnxruntime's own ceiling
    assert report["goals"]["batching_gain_vs_ceiling"]["value"] == round(1.5 / 1.056, 3)
    assert report["goals"]["batching_gain_vs_ceiling"]["met"] is True
    assert "dynamic_batching_speedup" not in report["goals"]  # retired: the figure stays
    table = format_table(report)
    assert "face_embedding: 21.5 ms with model_warmup, 95.0 ms without (steady 20.0 ms)" in table
    assert "batching ceiling in process, face_embedding: 1.056x" in table
    skipped = summarize(fake_scenarios(), BenchOptions(quick=True),
                        datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc), machine(),
                        None, {"first_request_after_publish": {"skipped": "with --url"}})
    assert "first request after publish: skipped: with --url" in format_table(skipped)


@pytest.mark.parametrize(("perf_p50_ms", "agree"), [(200.0, True), (290.0, True),
                                                    (476.0, False), (130.0, False)])
def test_the_sdks_first_sight_of_each_input_checks_perf_analyzers_one_client(perf_p50_ms,
                                                                             agree):
    """The second instrument: each input once through the SDK (here 0.19-0.21 s), beside
    perf_analyzer's p50 at one client; beyond 1.5x apart either way, the report says so."""
    from kyc_tools.dev.bench.measure import first_sight_figures

    levels = [{"concurrency": 1, "latency_ms": {"p50": perf_p50_ms}},
              {"concurrency": 2, "latency_ms": {"p50": 900.0}}]
    figs = first_sight_figures([0.19, 0.2, 0.21], levels)
    assert figs["latency_ms"]["p50"] == 200.0 and figs["each_ms"] == [190.0, 200.0, 210.0]
    assert figs["perf_analyzer_p50_at_1_over_this"] == round(perf_p50_ms / 200.0, 3)
    assert figs["agree"] is agree
    scenarios = {**fake_scenarios(), "kyc_ensemble": {
        **fake_scenarios()["kyc_ensemble"], "first_sight": figs}}
    table = format_table(summarize(scenarios, BenchOptions(quick=True),
                                   datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
                                   machine(), None))
    line = next(line for line in table.splitlines() if "once through the SDK" in line)
    assert line.startswith("kyc_ensemble: each of its 3 inputs") and "p50 200.0 ms" in line
    assert ("(agree)" in line) is agree and ("DISAGREE" in line) is not agree


def test_without_a_level_at_one_client_the_first_sight_judges_nothing():
    from kyc_tools.dev.bench.measure import first_sight_figures

    figs = first_sight_figures([0.2], [{"concurrency": 4, "latency_ms": {"p50": 500.0}}])
    assert "agree" not in figs and figs["requests"] == 1


@pytest.mark.parametrize("quick", [True, False])
def test_a_quick_run_sends_the_same_customers_and_documents_as_a_full_one(quick, monkeypatch):
    """A quick run is shorter windows and fewer levels, never other inputs (a quick run
    once read kyc_ensemble at half of what a full run and a client read)."""
    import asyncio

    from kyc_tools.dev.bench import document, kyc, scenarios

    asked = {}
    monkeypatch.setattr(kyc, "kyc_cases", lambda n: asked.setdefault("kyc", n) and [])
    monkeypatch.setattr(document, "document_cases", lambda n: asked.setdefault("doc", n) and [])

    class FakeBench:
        options = BenchOptions.for_run(quick=quick)

        def models_of(self, *entries):
            return entries

        async def sweep(self, *args, **kwargs):
            return {}

        def in_process(self, *args, **kwargs):
            return {}

    asyncio.run(scenarios.run_kyc(FakeBench()))
    asyncio.run(scenarios.run_document(FakeBench()))
    assert asked == {"kyc": scenarios.KYC_CUSTOMERS, "doc": scenarios.DOCUMENTS}


def test_quick_options_are_smaller_and_unknown_groups_are_refused():
    quick, full = BenchOptions.for_run(quick=True), BenchOptions.for_run(quick=False)
    assert quick.window.window_s < full.window.window_s
    assert len(quick.levels_of("kyc")) < len(full.levels_of("kyc")) == 5
    assert BenchOptions.for_run(quick=True, levels=[4, 1]).levels_of("kyc") == (1, 4)
    with pytest.raises(BenchError, match="nope"):
        BenchOptions.for_run(quick=True, groups=["nope"])


def test_the_bench_command_parses_its_options_and_offers_exactly_the_groups(tmp_path):
    args = build_parser().parse_args(["bench", "--quick", "--json", str(tmp_path / "b.json"),
                                      "--scenario", "kyc", "--levels", "1,4"])
    assert args.quick and args.scenario == ["kyc"] and args.levels == (1, 4)
    assert cli.BENCH_GROUPS == GROUPS
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--levels", "0"])
    assert cli.bench_output_dir(tmp_path / "b.json", None) == tmp_path / "b-files"


def test_bench_without_its_instruments_names_the_one_command_that_installs_them(
        monkeypatch, capsys):
    from kyc_tools.cli import bench as bench_cli
    from kyc_tools.dev.bench import perf_analyzer

    installed = {"perf_analyzer": True, "rapidocr_onnxruntime": True}
    monkeypatch.setattr(perf_analyzer, "available", lambda: installed["perf_analyzer"])
    monkeypatch.setattr(bench_cli.importlib.util, "find_spec",
                        lambda name: object() if installed[name] else None)
    assert bench_cli.missing_instruments([]) == []
    installed.update(perf_analyzer=False, rapidocr_onnxruntime=False)
    assert bench_cli.missing_instruments([]) == ["perf_analyzer", "rapidocr-onnxruntime"]
    assert bench_cli.missing_instruments(["kyc"]) == ["perf_analyzer"]
    assert bench_cli.missing_instruments(["liveness", "publish"]) == []
    args = build_parser().parse_args(["bench", "--quick"])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert "perf_analyzer and rapidocr-onnxruntime not installed" in err
    assert "`make bench-tools`" in err and "--own-clients" in err
    makefile = (Path(__file__).parents[2] / "Makefile").read_text()
    assert "\nbench-tools: perf-analyzer $(VENV)/.installed-peers\n" in makefile
    ran = []
    monkeypatch.setattr("kyc_tools.dev.bench.scenarios.run_bench",
                        lambda options: ran.append(options)
                        or (_ for _ in ()).throw(OSError("stop here")))
    own = build_parser().parse_args(["bench", "--quick", "--own-clients"])
    assert own.func(own) == 1 and ran  # measured (here: stopped) without the instruments


def test_bench_refuses_a_repository_without_weights(tmp_path):
    (tmp_path / "face_detector").mkdir()
    (tmp_path / "face_detector" / "config.pbtxt").write_text('name: "face_detector"\n')
    with pytest.raises(BenchError, match="make setup"):
        check_weights(tmp_path, ["face_detector"])
