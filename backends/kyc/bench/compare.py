"""``kyc bench --compare URL --compare URL``: running servers side by side, in one run.

The end-to-end workload of ``kyc bench`` (:mod:`kyc.bench.kyc`: ``kyc_ensemble`` on a
rendered passport page with a real portrait and a selfie, no liveness token) is sent
to each server in turn, one measured window after the other (A, B, A, B, ...), so that
whatever else the machine does falls on all of them alike; each server's windows are
pooled into its latency percentiles and throughput. The first server is the reference:
``p95_ratio`` is each server's p95 over its p95.

Made to hold the production image (a container) against ``kyc serve`` on the host
(docs/image.md), it compares any servers that serve the repository: two versions, two
machines' worth of settings, two images.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from kyc.bench.core import AsyncClient, Measurement, Window, latency_ms, measure_level

ROUNDS = 4
WINDOW = Window(warmup_s=2.0, window_s=15.0, min_requests=10, max_s=60.0)


async def compare_servers(urls: Sequence[str], make_client: Callable[[str, int], AsyncClient],
                          *, concurrency: int = 1, rounds: int = ROUNDS,
                          window: Window = WINDOW) -> list[Measurement]:
    """One pooled :class:`Measurement` per url, from ``rounds`` windows each, in turns."""
    pooled = [Measurement(concurrency=concurrency) for _ in urls]
    for _ in range(rounds):
        for url, into in zip(urls, pooled, strict=True):
            level = await measure_level(lambda k, url=url: make_client(url, k), concurrency,
                                        window)
            got = level.measurement
            into.seconds += got.seconds
            into.latencies_s.extend(got.latencies_s)
            into.errors += got.errors
            for key, value in got.tallies.items():
                into.tallies[key] = into.tallies.get(key, 0) + value
    return pooled


def comparison_report(urls: Sequence[str], pooled: Sequence[Measurement], *,
                      workload: str, rounds: int, window: Window) -> dict[str, Any]:
    servers = []
    for url, got in zip(urls, pooled, strict=True):
        done = len(got.latencies_s)
        servers.append({"url": url, "requests": got.requests, "errors": got.errors,
                        "per_s": round(done / got.seconds, 3) if got.seconds else 0.0,
                        "latency_ms": latency_ms(got.latencies_s), "tallies": got.tallies})
    reference = servers[0]["latency_ms"]["p95"]
    for server in servers:
        p95 = server["latency_ms"]["p95"]
        server["p95_ratio"] = round(p95 / reference, 3) if p95 and reference else None
    return {"workload": workload, "concurrency": pooled[0].concurrency if pooled else 0,
            "rounds": rounds, "window_s": window.window_s,
            "method": "windows in turns (A, B, A, B, ...) after a warm-up each; "
                      "latencies pooled per server; p95_ratio against the first server",
            "servers": servers}


def run_comparison(urls: Sequence[str], *, concurrency: int = 1, rounds: int | None = None,
                   window_s: float | None = None) -> dict[str, Any]:
    """Compare the servers at ``urls`` (gRPC host:port) on the kyc_ensemble workload."""
    from kyc.bench.kyc import KYC_DESCRIPTION, kyc_cases
    from kyc.bench.scenarios import KycClient

    rounds = ROUNDS if rounds is None else rounds
    window = WINDOW if window_s is None else dataclasses.replace(WINDOW, window_s=window_s)
    cases = kyc_cases(8)
    pooled = asyncio.run(compare_servers(
        urls, lambda url, k: KycClient(url, cases, k), concurrency=concurrency, rounds=rounds,
        window=window))
    return comparison_report(urls, pooled, workload=KYC_DESCRIPTION, rounds=rounds,
                             window=window)


def format_comparison(report: dict[str, Any]) -> str:
    lines = [f"kyc_ensemble, concurrency {report['concurrency']}, {report['rounds']} windows "
             f"of {report['window_s']:g} s per server, in turns",
             f"{'server':<24} {'answered':>8} {'errors':>6} {'per s':>7} {'p50 ms':>8} "
             f"{'p95 ms':>8} {'p99 ms':>8} {'p95 ratio':>9}"]
    for s in report["servers"]:
        lat = s["latency_ms"]
        ms = [f"{lat[k]:8.1f}" if lat[k] is not None else f"{'-':>8}"
              for k in ("p50", "p95", "p99")]
        ratio = f"{s['p95_ratio']:9.3f}" if s["p95_ratio"] is not None else f"{'-':>9}"
        lines.append(f"{s['url']:<24} {s['requests'] - s['errors']:>8} {s['errors']:>6} "
                     f"{s['per_s']:>7.2f} {' '.join(ms)} {ratio}")
    return "\n".join(lines)
