"""kyc_tools.dev.bench.compare: servers measured in turns, their windows pooled."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

from kyc_tools.dev.bench.compare import (
    ServerUse,
    compare_servers,
    comparison_report,
    format_comparison,
)
from kyc_tools.dev.bench.options import Window
from kyc_tools.dev.bench.procmem import listening_pid

TINY = Window(warmup_s=0.0, window_s=0.05, min_requests=3, max_s=5.0)


class Fake:
    """A client of a server that answers after ``delay_s``; logs which server it asked."""

    def __init__(self, url: str, delay_s: float, calls: list[str], fail: bool = False):
        self.url, self.delay_s, self.calls, self.fail = url, delay_s, calls, fail

    async def next(self):
        self.calls.append(self.url)
        await asyncio.sleep(self.delay_s)
        if self.fail:
            raise RuntimeError("refused")
        return {"requests_decided": 1}

    async def close(self):
        pass


def test_servers_are_measured_in_turns_and_each_ones_windows_are_pooled():
    calls: list[str] = []
    delays = {"a:1": 0.005, "b:2": 0.02}

    pooled = asyncio.run(compare_servers(list(delays), lambda url, k: Fake(url, delays[url],
                                                                             calls),
                                         rounds=3, window=TINY))

    turns = [url for i, url in enumerate(calls) if i == 0 or calls[i - 1] != url]
    assert turns == ["a:1", "b:2"] * 3
    a, b = pooled
    assert len(a.latencies_s) >= 9 and len(b.latencies_s) >= 9  # 3 windows of >= 3 each
    assert a.tallies["requests_decided"] == len(a.latencies_s)
    report = comparison_report(list(delays), pooled, workload="w", rounds=3, window=TINY)
    first, second = report["servers"]
    assert first["p95_ratio"] == 1.0
    assert second["p95_ratio"] == pytest.approx(4, rel=0.5)
    assert "p95 ratio" in format_comparison(report) and "b:2" in format_comparison(report)


def test_failed_requests_are_counted_and_leave_no_ratio():
    calls: list[str] = []
    pooled = asyncio.run(compare_servers(
        ["ok:1", "bad:2"], lambda url, k: Fake(url, 0.002, calls, fail=url == "bad:2"),
        rounds=1, window=TINY))

    report = comparison_report(["ok:1", "bad:2"], pooled, workload="w", rounds=1, window=TINY)
    bad = report["servers"][1]
    assert bad["errors"] == bad["requests"] > 0
    assert bad["latency_ms"]["p95"] is None and bad["p95_ratio"] is None
    assert " - " in format_comparison(report) or "-" in format_comparison(report).splitlines()[-1]


def test_a_local_server_is_found_by_its_port_and_a_remote_one_is_not_metered():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert listening_pid(port) == os.getpid()
        assert ServerUse.of(f"127.0.0.1:{port}").pid == os.getpid()
    assert listening_pid(port) is None  # closed
    assert ServerUse.of("kyc.example.com:8001").pid is None


def test_metered_servers_report_cpu_per_customer_and_memory_with_ratios_to_the_first():
    calls: list[str] = []
    urls = ["a:1", "b:2", "far:3"]
    pooled = asyncio.run(compare_servers(urls, lambda url, k: Fake(url, 0.002, calls),
                                         rounds=1, window=TINY))
    uses = [ServerUse(1, cpu_s=10.0, answered=20, memory_mib=1600.0),
            ServerUse(2, cpu_s=6.0, answered=24, memory_mib=1500.0), ServerUse(None)]
    report = comparison_report(urls, pooled, workload="w", rounds=1, window=TINY, uses=uses)
    a, b, far = report["servers"]
    assert (a["cpu_s_per_customer"], a["cpu_ratio"], a["memory_ratio"]) == (0.5, 1.0, 1.0)
    assert (b["cpu_s_per_customer"], b["cpu_ratio"], b["memory_ratio"]) == (0.25, 0.5, 0.938)
    assert far["cpu_s_per_customer"] is far["cpu_ratio"] is far["memory_mib"] is None
    table = format_comparison(report)
    assert "CPU s/cust" in table and "0.250" in table and "1500" in table


def test_a_liveness_comparison_counts_cpu_per_frame_answered_by_liveness_sequence(monkeypatch):
    from kyc_tools.dev.bench import compare

    asked: list[str] = []

    async def answered(url, model):
        asked.append(model)
        return 100 * len(asked)

    monkeypatch.setattr(compare, "_answered", answered)
    monkeypatch.setattr(compare, "process_cpu_seconds", lambda pid: 0.0)
    use = ServerUse(1)
    pooled = asyncio.run(compare_servers(["a:1"], lambda url, k: Fake(url, 0.001, []),
                                         rounds=1, window=TINY, uses=[use],
                                         model="liveness_sequence"))
    assert asked == ["liveness_sequence"] * 2 and use.answered == 100
    use.cpu_s = 2.0
    report = comparison_report(["a:1"], pooled, workload="w", rounds=1, window=TINY,
                               uses=[use], model="liveness_sequence", unit="frame")
    (server,) = report["servers"]
    assert server["cpu_s_per_frame"] == 0.02 and "cpu_s_per_customer" not in server
    assert report["model"] == "liveness_sequence"
    table = format_comparison(report)
    assert table.startswith("liveness_sequence, concurrency") and "CPU s/frame" in table


def test_compare_offers_the_kyc_and_liveness_workloads_and_refuses_others(monkeypatch, capsys,
                                                                          tmp_path):
    import json

    from kyc_tools.cli import build_parser
    from kyc_tools.dev.bench import compare

    assert {w: compare.WORKLOADS[w].concurrency for w in compare.WORKLOADS} == {
        "kyc": 1, "document": 1, "liveness": 8}
    base = ["bench", "--compare", "a:1", "--compare", "b:2"]
    args = build_parser().parse_args([*base, "--scenario", "batching"])
    assert args.func(args) == 2 and "kyc, document, liveness only" in capsys.readouterr().err
    ran = []

    def fake_run(urls, *, workload, concurrency, rounds, window_s):
        ran.append((workload, concurrency))
        return {"model": compare.WORKLOADS[workload].model, "unit": "u", "concurrency": 1,
                "rounds": 1, "window_s": 1.0, "servers": []}

    monkeypatch.setattr(compare, "run_comparison", fake_run)
    args = build_parser().parse_args([*base, "--scenario", "kyc", "--scenario", "liveness",
                                      "--json", str(tmp_path / "c.json")])
    assert args.func(args) == 0
    assert ran == [("kyc", None), ("liveness", None)]  # each at its own level
    saved = json.loads((tmp_path / "c.json").read_text())
    assert [c["model"] for c in saved["comparisons"]] == ["kyc_ensemble", "liveness_sequence"]
