"""Open-loop load: requests at a fixed arrival rate, whatever the answers.

A closed loop (N clients, each waiting for its answer) slows down with the server
and never overloads it; an open loop keeps sending on schedule, as real customers
do, so it shows what the server does beyond its capacity. Each request's latency is
counted from its *scheduled* send time (no coordinated omission: a late send counts
as waiting).

    start = triton_starter(url, "face_preprocess", make_inputs)
    outcomes = run_open_loop(start, rate_per_s=12.0, duration_s=20.0)
    print(summarize(outcomes))

Only request ids, times and gRPC status codes and messages are recorded, never
inputs or outputs (personal data).
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

OK = "OK"
Done = Callable[[BaseException | None], None]
# starts one request without blocking; calls done(None) or done(error) when answered
Starter = Callable[[Done], None]


@dataclass(frozen=True)
class Outcome:
    """One request: when it was due (s from the run's start), how long until its
    answer (s, from when it was due), and ``OK`` or the gRPC status name."""

    due_s: float
    latency_s: float
    status: str
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status == OK


def arrival_times(rate_per_s: float, duration_s: float) -> list[float]:
    """Evenly spaced send times (s from the start) for ``rate_per_s`` over ``duration_s``."""
    if rate_per_s <= 0 or duration_s <= 0:
        raise ValueError("rate and duration must be positive")
    count = math.floor(rate_per_s * duration_s + 1e-9)
    return [k / rate_per_s for k in range(count)]


def grpc_status(error: BaseException) -> str:
    """``UNAVAILABLE``, ``INVALID_ARGUMENT``... of a tritonclient error (``UNKNOWN``
    when it carries none)."""
    status = getattr(error, "status", None)
    text = str((status() if callable(status) else status) or "")
    name = text.rsplit(".", 1)[-1].strip()
    return name or "UNKNOWN"


def error_message(error: BaseException) -> str:
    message = getattr(error, "message", None)
    return str(message() if callable(message) else error)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100), nearest rank; nan for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def summarize(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """Counts per status, and p50/p99/max latency (ms) of the requests answered OK."""
    ok = [o.latency_s * 1000.0 for o in outcomes if o.ok]
    return {"requests": len(outcomes), "ok": len(ok),
            "statuses": dict(Counter(o.status for o in outcomes)),
            "p50_ms": round(percentile(ok, 50), 1), "p99_ms": round(percentile(ok, 99), 1),
            "max_ms": round(max(ok), 1) if ok else math.nan}


def split_by_time(outcomes: Sequence[Outcome], parts: int) -> list[list[Outcome]]:
    """The outcomes in ``parts`` equal spans of due time (e.g. thirds of a soak)."""
    if not outcomes:
        return [[] for _ in range(parts)]
    end = max(o.due_s for o in outcomes) + 1e-9
    spans: list[list[Outcome]] = [[] for _ in range(parts)]
    for o in outcomes:
        spans[min(parts - 1, int(o.due_s / end * parts))].append(o)
    return spans


def run_open_loop(start: Starter, rate_per_s: float, duration_s: float,
                  drain_timeout_s: float = 120.0,
                  clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep) -> list[Outcome]:
    """Send at ``rate_per_s`` for ``duration_s``, then wait for the answers (at most
    ``drain_timeout_s``); the outcomes in send order. Requests never answered count
    as ``NO_ANSWER``."""
    times = arrival_times(rate_per_s, duration_s)
    results: list[Outcome | None] = [None] * len(times)
    lock = threading.Lock()
    answered = threading.Event()
    pending = [len(times)]
    t0 = clock()

    def finish(index: int, error: BaseException | None) -> None:
        latency = clock() - t0 - times[index]
        outcome = (Outcome(times[index], latency, OK) if error is None else
                   Outcome(times[index], latency, grpc_status(error), error_message(error)))
        with lock:
            results[index] = outcome
            pending[0] -= 1
            if pending[0] == 0:
                answered.set()

    for index, due in enumerate(times):
        wait = t0 + due - clock()
        if wait > 0:
            sleep(wait)
        try:
            start(lambda error, index=index: finish(index, error))
        except Exception as exc:  # refused before it left: counts as its outcome
            finish(index, exc)
    if times:
        answered.wait(drain_timeout_s)
    with lock:
        return [r if r is not None else Outcome(times[k], math.inf, "NO_ANSWER")
                for k, r in enumerate(results)]


RETRY_S = 0.25


def closed_loop_rate(call: Callable[[], Any], concurrency: int, duration_s: float,
                     retry_s: float = RETRY_S) -> float:
    """Capacity: answers per second with ``concurrency`` callers each sending its
    next request as soon as the last one is answered (errors count as not served; a
    caller refused waits ``retry_s``, as a client backs off, rather than spinning)."""
    served = [0] * concurrency
    stop = time.monotonic() + duration_s

    def caller(k: int) -> None:
        while time.monotonic() < stop:
            try:
                call()
            except Exception:
                time.sleep(retry_s)
                continue
            served[k] += 1

    t0 = time.monotonic()
    threads = [threading.Thread(target=caller, args=(k,)) for k in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(served) / (time.monotonic() - t0)


def triton_starter(client: Any, model: str, make_inputs: Callable[[], list],
                   timeout_s: float = 60.0) -> Starter:
    """A :data:`Starter` over a ``tritonclient.grpc.InferenceServerClient``'s
    ``async_infer`` (one shared client; its callbacks run on gRPC's threads)."""

    def start(done: Done) -> None:
        client.async_infer(model, make_inputs(), lambda result, error: done(error),
                           client_timeout=timeout_s)

    return start
