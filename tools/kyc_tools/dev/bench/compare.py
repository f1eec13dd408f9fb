"""``kyc bench --compare URL --compare URL``: running servers side by side, in one run.

Each workload of :data:`WORKLOADS` is sent to each server in turn, one measured window
after the other (A, B, A, B, ...), so that whatever else the machine does falls on all
of them alike; each server's windows are pooled into its latency percentiles and
throughput. The first server is the reference: ``p95_ratio`` is each server's p95 over
its p95. The workloads, chosen with ``--scenario``:

- ``kyc`` (the default): the end-to-end workload of ``kyc bench`` (:mod:`kyc_tools.dev.bench.kyc`:
  ``kyc_ensemble`` on a rendered passport page with a real portrait and a selfie, no
  liveness token), one client unless ``--levels`` says otherwise;
- ``document``: ``document_ocr`` on rendered, photographed documents
  (:mod:`kyc_tools.dev.bench.document`, each reading scored against the printed MRZ), one client;
- ``liveness``: sessions of ``liveness_sequence`` played frame by frame
  (:mod:`kyc_tools.dev.bench.liveness`, the frames rendered once from the first server's face
  landmarks and sent alike to all), 8 sessions at once unless ``--levels`` says
  otherwise; a latency is one frame's.

A server on this machine (its port's listener found in /proc) is metered too: the CPU
seconds of its processes (tritonserver and its Python stubs) over its windows, per
request of the workload's model it answered in them (Triton's own count: warm-ups
included, as their CPU is): per customer, or per liveness frame; and at the end the
memory resident in them (distinct pages, :mod:`kyc_tools.dev.bench.procmem`); ``cpu_ratio`` and
``memory_ratio`` against the first.

Made to hold the production image (a container) against ``kyc serve`` on the host
(docs/image.md), it compares any servers that serve the repository: two versions, two
machines' worth of settings, two images.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from kyc_tools.dev.bench.measure import AsyncClient, Measurement, latency_ms, measure_level
from kyc_tools.dev.bench.options import Window
from kyc_tools.dev.bench.procmem import listening_pid, resident_union_mib
from kyc_tools.dev.bench.stats import process_cpu_seconds, stats_totals
from kyc_tools.operator.procs import process_tree

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]", "0.0.0.0")


@dataclasses.dataclass(frozen=True)
class Workload:
    """What one comparison sends: ``model``'s answers are what CPU is counted per
    (one ``unit`` each), at ``concurrency`` clients unless told otherwise."""

    name: str
    model: str
    unit: str
    concurrency: int


WORKLOADS = {w.name: w for w in (Workload("kyc", "kyc_ensemble", "customer", 1),
                                  Workload("document", "document_ocr", "document", 1),
                                  Workload("liveness", "liveness_sequence", "frame", 8))}

ROUNDS = 4
WINDOW = Window(warmup_s=2.0, window_s=15.0, min_requests=10, max_s=60.0)


@dataclasses.dataclass
class ServerUse:
    """What a server on this machine spent over its windows (``pid``: its tritonserver;
    None: not on this machine, nothing metered)."""

    pid: int | None
    cpu_s: float = 0.0
    answered: int = 0  # requests of the workload's model answered over the same spans
    memory_mib: float | None = None

    @classmethod
    def of(cls, url: str) -> ServerUse:
        host, _, port = url.rpartition(":")
        local = host in LOCAL_HOSTS and port.isdigit()
        return cls(listening_pid(int(port)) if local else None)

    def processes(self) -> list[int]:
        return process_tree(self.pid) if self.pid else []


async def _answered(url: str, model: str) -> int:
    import tritonclient.grpc.aio as aioclient

    client = aioclient.InferenceServerClient(url)
    try:
        return stats_totals(await client.get_inference_statistics(
            model_name=model, as_json=True))["requests"]
    finally:
        await client.close()


async def _metered(use: ServerUse, url: str, model: str, run: Callable[[], Any]) -> Any:
    """``await run()``, adding the CPU and ``model``'s answers it took to ``use``."""
    if use.pid is None:
        return await run()
    cpu, answered = process_cpu_seconds(use.pid), await _answered(url, model)
    result = await run()
    use.cpu_s += process_cpu_seconds(use.pid) - cpu
    use.answered += await _answered(url, model) - answered
    return result


async def compare_servers(urls: Sequence[str], make_client: Callable[[str, int], AsyncClient],
                          *, concurrency: int = 1, rounds: int = ROUNDS,
                          window: Window = WINDOW, uses: Sequence[ServerUse] | None = None,
                          model: str = "kyc_ensemble") -> list[Measurement]:
    """One pooled :class:`Measurement` per url, from ``rounds`` windows each, in turns
    (and, with ``uses``, each local server metered over its windows: CPU per request
    of ``model``)."""
    pooled = [Measurement(concurrency=concurrency) for _ in urls]
    uses = uses or [ServerUse(None) for _ in urls]
    for _ in range(rounds):
        for url, into, use in zip(urls, pooled, uses, strict=True):
            level = await _metered(use, url, model, lambda url=url: measure_level(
                lambda k: make_client(url, k), concurrency, window))
            got = level.measurement
            into.seconds += got.seconds
            into.latencies_s.extend(got.latencies_s)
            into.errors += got.errors
            for key, value in got.tallies.items():
                into.tallies[key] = into.tallies.get(key, 0) + value
    return pooled


def _ratio(value: float | None, reference: float | None) -> float | None:
    return round(value / reference, 3) if value and reference else None


def comparison_report(urls: Sequence[str], pooled: Sequence[Measurement], *,
                      workload: str, rounds: int, window: Window,
                      uses: Sequence[ServerUse] | None = None,
                      model: str = "kyc_ensemble", unit: str = "customer") -> dict[str, Any]:
    servers = []
    uses = uses or [ServerUse(None) for _ in urls]
    per = f"cpu_s_per_{unit}"
    for url, got, use in zip(urls, pooled, uses, strict=True):
        done = len(got.latencies_s)
        servers.append({"url": url, "requests": got.requests, "errors": got.errors,
                        "per_s": round(done / got.seconds, 3) if got.seconds else 0.0,
                        "latency_ms": latency_ms(got.latencies_s), "tallies": got.tallies,
                        per: round(use.cpu_s / use.answered, 4) if use.answered else None,
                        "memory_mib": use.memory_mib})
    first = servers[0]
    for server in servers:
        server["p95_ratio"] = _ratio(server["latency_ms"]["p95"], first["latency_ms"]["p95"])
        server["cpu_ratio"] = _ratio(server[per], first[per])
        server["memory_ratio"] = _ratio(server["memory_mib"], first["memory_mib"])
    return {"workload": workload, "model": model, "unit": unit,
            "concurrency": pooled[0].concurrency if pooled else 0,
            "rounds": rounds, "window_s": window.window_s,
            "method": "windows in turns (A, B, A, B, ...) after a warm-up each; "
                      "latencies pooled per server; p95_ratio against the first server; "
                      f"a server on this machine: CPU seconds of its processes per {model} "
                      "request answered over its windows (warm-ups included) and its "
                      "resident memory at the end (distinct pages)",
            "servers": servers}


def _make_clients(workload: Workload, urls: Sequence[str]
                  ) -> tuple[str, Callable[[str, int], AsyncClient]]:
    """The workload's description and its client factory (url, index) -> client."""
    if workload.name == "liveness":
        from kyc_tools.dev.bench.liveness import (
            LIVENESS_DESCRIPTION,
            LivenessBenchClient,
            MoveLibrary,
        )

        moves = MoveLibrary.build(urls[0])
        return LIVENESS_DESCRIPTION, lambda url, k: LivenessBenchClient(url, moves, k)
    if workload.name == "document":
        from kyc_tools.dev.bench.document import (
            DOCUMENT_DESCRIPTION,
            DocumentClient,
            document_cases,
        )

        documents = document_cases(8)
        return DOCUMENT_DESCRIPTION, lambda url, k: DocumentClient(url, documents, k)
    from kyc_tools.dev.bench.kyc import KYC_DESCRIPTION, kyc_cases
    from kyc_tools.dev.bench.scenarios import KycClient

    cases = kyc_cases(8)
    return KYC_DESCRIPTION, lambda url, k: KycClient(url, cases, k)


def run_comparison(urls: Sequence[str], *, workload: str = "kyc",
                   concurrency: int | None = None, rounds: int | None = None,
                   window_s: float | None = None) -> dict[str, Any]:
    """Compare the servers at ``urls`` (gRPC host:port) on one of :data:`WORKLOADS`."""
    chosen = WORKLOADS[workload]
    rounds = ROUNDS if rounds is None else rounds
    window = WINDOW if window_s is None else dataclasses.replace(WINDOW, window_s=window_s)
    description, make_client = _make_clients(chosen, urls)
    uses = [ServerUse.of(url) for url in urls]
    pooled = asyncio.run(compare_servers(
        urls, make_client, concurrency=concurrency or chosen.concurrency, rounds=rounds,
        window=window, uses=uses, model=chosen.model))
    for use in uses:
        use.memory_mib = resident_union_mib(use.processes()) if use.pid else None
    return comparison_report(urls, pooled, workload=description, rounds=rounds,
                             window=window, uses=uses, model=chosen.model, unit=chosen.unit)


def format_comparison(report: dict[str, Any]) -> str:
    unit = report.get("unit", "customer")
    per = "CPU s/" + {"customer": "cust", "document": "doc"}.get(unit, unit)
    lines = [f"{report.get('model', 'kyc_ensemble')}, concurrency {report['concurrency']}, "
             f"{report['rounds']} windows of {report['window_s']:g} s per server, in turns",
             f"{'server':<24} {'answered':>8} {'errors':>6} {'per s':>7} {'p50 ms':>8} "
             f"{'p95 ms':>8} {'p99 ms':>8} {'p95 ratio':>9} {per:>11} "
             f"{'CPU ratio':>9} {'MiB':>7} {'MiB ratio':>9}"]
    for s in report["servers"]:
        lat = s["latency_ms"]
        ms = [_cell(lat[k], 8, ".1f") for k in ("p50", "p95", "p99")]
        lines.append(f"{s['url']:<24} {s['requests'] - s['errors']:>8} {s['errors']:>6} "
                     f"{s['per_s']:>7.2f} {' '.join(ms)} {_cell(s['p95_ratio'], 9, '.3f')} "
                     f"{_cell(s.get(f'cpu_s_per_{unit}'), 11, '.4f')} "
                     f"{_cell(s.get('cpu_ratio'), 9, '.3f')} "
                     f"{_cell(s.get('memory_mib'), 7, '.0f')} "
                     f"{_cell(s.get('memory_ratio'), 9, '.3f')}")
    return "\n".join(lines)


def _cell(value: float | None, width: int, form: str) -> str:
    return f"{value:{width}{form}}" if value is not None else f"{'-':>{width}}"
