"""One measured level of ``kyc bench``: closed loops of clients (or in-process
batches) over a warm-up and a fixed window, and the figures of what they answered."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from kyc_tools.dev.bench.options import Window

log = logging.getLogger(__name__)
DRAIN_TIMEOUT_S = 60.0  # how long a level's clients may take to finish after it


# -- measurement ---------------------------------------------------------------------
# An answered request's tallies (e.g. {"faces_found": 1}), summed over the window;
# or what went wrong.
Outcome = Mapping[str, int] | Exception


class AsyncClient(Protocol):
    """One closed-loop client: ``next()`` sends one request and returns its tallies."""

    async def next(self) -> Mapping[str, int]: ...

    async def close(self) -> None: ...


class InProcessRunner(Protocol):
    """A path without Triton: a batch of payloads in, one outcome each out."""

    max_batch: int

    def __call__(self, payloads: Sequence[Any]) -> list[Outcome]: ...

    def settings(self) -> dict[str, Any]: ...


@dataclass
class Measurement:
    """Raw results of one measured window."""

    concurrency: int
    seconds: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    errors: int = 0
    tallies: dict[str, int] = field(default_factory=dict)

    @property
    def requests(self) -> int:
        return len(self.latencies_s) + self.errors

    def record(self, outcome: Outcome, latency_s: float) -> None:
        if isinstance(outcome, Exception):
            self.errors += 1
            log.log(logging.WARNING if self.errors <= 3 else logging.DEBUG,
                    "request failed: %s", type(outcome).__name__)
            return
        self.latencies_s.append(latency_s)
        for key, value in outcome.items():
            self.tallies[key] = self.tallies.get(key, 0) + int(value)


StatsReader = Callable[[], Awaitable[dict[str, dict[str, int]]]]


@dataclass
class Level:
    """One measured concurrency level: the window, and the statistics around it."""

    measurement: Measurement
    stats_before: dict[str, dict[str, int]] = field(default_factory=dict)
    stats_after: dict[str, dict[str, int]] = field(default_factory=dict)
    background: Measurement | None = None  # requests of a concurrent load, if any


async def _phase(until: Callable[[float], bool], max_s: float,
                 tasks: Sequence[asyncio.Task]) -> float:
    started = time.perf_counter()
    while True:
        elapsed = time.perf_counter() - started
        if until(elapsed) or elapsed >= max_s:
            return elapsed
        failed = [t for t in tasks if t.done() and t.exception() is not None]
        if failed:
            raise failed[0].exception()  # type: ignore[misc]
        await asyncio.sleep(0.02)


async def measure_level(make_client: Callable[[int], AsyncClient], concurrency: int,
                        window: Window, stats: StatsReader | None = None,
                        background: Sequence[AsyncClient] = ()) -> Level:
    """``concurrency`` closed-loop clients: warm-up, then the measured window, with
    ``stats`` read at both ends of it. ``background`` clients load the server during
    the whole level; their answers in the window are counted apart."""
    clients = [make_client(k) for k in range(concurrency)]
    measurement = Measurement(concurrency=concurrency)
    load = Measurement(concurrency=len(background)) if background else None
    answered = [0] * (len(clients) + len(background))
    counting = False
    stopping = False

    async def loop(k: int, client: AsyncClient, into: Measurement | None) -> None:
        while not stopping:
            started = time.perf_counter()
            try:
                outcome: Outcome = await client.next()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # counted; the load goes on
                outcome = exc
            answered[k] += 1
            if counting and into is not None:
                into.record(outcome, time.perf_counter() - started)

    tasks = [asyncio.create_task(loop(k, c, measurement)) for k, c in enumerate(clients)]
    tasks += [asyncio.create_task(loop(len(clients) + k, c, load))
              for k, c in enumerate(background)]
    level = Level(measurement, background=load)
    try:
        await _phase(lambda t: t >= window.warmup_s and min(answered) > 0, window.max_s,
                     tasks)
        if stats is not None:
            level.stats_before = await stats()
        counting = True
        # The window also holds at least one answer of the background load (a
        # document can take longer than a quick window).
        measurement.seconds = await _phase(
            lambda t: t >= window.window_s and measurement.requests >= window.min_requests
            and (load is None or load.requests > 0), window.max_s, tasks)
        counting = False
        if load is not None:
            load.seconds = measurement.seconds
        if stats is not None:
            level.stats_after = await stats()
    finally:
        # Drain: every client finishes the request it has in flight. A request
        # cancelled here would go on running in the server during the next level
        # (and a cancelled ensemble request was seen to keep an unloaded model's
        # stub alive). Cancelled only past DRAIN_TIMEOUT_S.
        stopping = True
        _, pending = await asyncio.wait(tasks, timeout=DRAIN_TIMEOUT_S)
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if pending:
            log.warning("%d clients still waiting %.0f s after the window: cancelled",
                        len(pending), DRAIN_TIMEOUT_S)
        for client in [*clients, *background]:
            with contextlib.suppress(Exception):
                await client.close()
    return level


def measure_batches(runner: InProcessRunner, payloads: Sequence[Any], concurrency: int,
                    window: Window) -> Measurement:
    """In process: batches of min(concurrency, max batch), as if that many clients
    waited on a perfect batcher, each answered when its batch is done; a warm-up
    batch, then batches until the window is over."""
    size = max(1, min(concurrency, runner.max_batch))
    counter = 0

    def batch() -> list[Any]:
        nonlocal counter
        chosen = [payloads[(counter + i) % len(payloads)] for i in range(size)]
        counter += size
        return chosen

    def run(into: Measurement | None) -> None:
        chosen = batch()
        started = time.perf_counter()
        try:
            outcomes = runner(chosen)
        except Exception as exc:  # the whole batch failed
            outcomes = [exc] * len(chosen)
        elapsed = time.perf_counter() - started
        if into is not None:
            for outcome in outcomes:
                into.record(outcome, elapsed)

    warm_started = time.perf_counter()
    while True:
        run(None)
        if time.perf_counter() - warm_started >= min(window.warmup_s, window.max_s):
            break
    measurement = Measurement(concurrency=concurrency)
    started = time.perf_counter()
    while True:
        run(measurement)
        elapsed = time.perf_counter() - started
        if (elapsed >= window.window_s and measurement.requests >= window.min_requests) \
                or elapsed >= window.max_s:
            break
    measurement.seconds = time.perf_counter() - started
    return measurement


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100, linear interpolation); NaN for no values."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else math.nan


def latency_ms(latencies_s: Sequence[float]) -> dict[str, float | None]:
    """p50/p90/p95/p99 and the mean in milliseconds; None when nothing was answered."""
    if not latencies_s:
        return {"p50": None, "p90": None, "p95": None, "p99": None, "avg": None}
    figs: dict[str, float | None] = {f"p{q}": round(percentile(latencies_s, q) * 1e3, 2)
                                     for q in (50, 90, 95, 99)}
    figs["avg"] = round(float(np.mean(latencies_s)) * 1e3, 2)
    return figs


# How far apart a served scenario's two instruments may read one client's latency before
# the report says they disagree: perf_analyzer's p50 at one client over the SDK's p50 of
# the same inputs, each sent once (issue 48: a run once read half of what clients got).
AGREEMENT = (2 / 3, 1.5)


def first_sight_figures(latencies_s: Sequence[float],
                        levels: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The SDK's check of a served scenario's inputs (each sent once, one at a time, new
    to the server) as a second instrument beside perf_analyzer: its latencies, and
    perf_analyzer's p50 at one client over its p50, and whether the two agree (absent
    when level 1 did not run)."""
    figs: dict[str, Any] = {
        "what": "each input sent once through the SDK, one at a time, new to the server",
        "requests": len(latencies_s), "latency_ms": latency_ms(latencies_s),
        "each_ms": [round(s * 1e3, 1) for s in latencies_s]}
    one = next((row for row in levels if row.get("concurrency") == 1), None)
    theirs = (one or {}).get("latency_ms", {}).get("p50")
    ours = figs["latency_ms"]["p50"]
    if theirs and ours:
        ratio = theirs / ours
        figs["perf_analyzer_p50_at_1_over_this"] = round(ratio, 3)
        figs["agree"] = AGREEMENT[0] <= ratio <= AGREEMENT[1]
    return figs


def level_figures(measurement: Measurement) -> dict[str, Any]:
    """The reported figures of one window: ``per_s`` counts answered requests only."""
    done = len(measurement.latencies_s)
    return {
        "concurrency": measurement.concurrency,
        "per_s": round(done / measurement.seconds, 3) if measurement.seconds > 0 else 0.0,
        "latency_ms": latency_ms(measurement.latencies_s),
        "requests": measurement.requests,
        "errors": measurement.errors,
        "seconds": round(measurement.seconds, 3),
        **measurement.tallies,
    }
