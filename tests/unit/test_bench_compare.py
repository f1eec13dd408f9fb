"""kyc.bench.compare: servers measured in turns, their windows pooled."""

from __future__ import annotations

import asyncio

import pytest

from kyc.bench.compare import compare_servers, comparison_report, format_comparison
from kyc.bench.core import Window

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
