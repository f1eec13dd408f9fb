"""The open-loop load generator: its schedule, its bookkeeping and its statistics."""

from __future__ import annotations

import math
import threading

import pytest
from tritonclient.utils import InferenceServerException

from loadgen import (
    OK,
    Outcome,
    arrival_times,
    closed_loop_rate,
    grpc_status,
    percentile,
    run_open_loop,
    split_by_time,
    summarize,
)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_arrivals_are_evenly_spaced_at_the_rate_for_the_duration():
    assert arrival_times(4.0, 1.0) == [0.0, 0.25, 0.5, 0.75]
    assert len(arrival_times(3.3, 10.0)) == 33
    with pytest.raises(ValueError):
        arrival_times(0.0, 1.0)


def test_requests_are_sent_on_schedule_whatever_the_answers_and_latency_counts_from_due_time():
    clock = FakeClock()
    sent, held = [], []

    def start(done):
        sent.append(clock.now)
        if len(sent) % 2:  # every other request is held: the loop must not wait for it
            held.append(done)
        else:
            clock.now += 0.01  # answered 10 ms after it left
            done(None)

    def answer_held():
        clock.now += 1.0
        for done in held:
            done(InferenceServerException("Request timeout expired",
                                          status="StatusCode.UNAVAILABLE"))

    timer = threading.Timer(0.05, answer_held)
    timer.start()
    outcomes = run_open_loop(start, 10.0, 1.0, clock=clock, sleep=clock.sleep)
    timer.join()
    assert len(sent) == 10
    assert sent[:2] == pytest.approx([0.0, 0.1])
    assert [o.status for o in outcomes] == ["UNAVAILABLE", OK] * 5
    assert outcomes[1].latency_s == pytest.approx(0.01)
    assert outcomes[0].message == "Request timeout expired"
    assert all(o.latency_s >= 1.0 for o in outcomes[::2])


def test_a_request_that_fails_to_leave_counts_as_its_outcome_and_unanswered_ones_are_marked():
    clock = FakeClock()
    calls = []

    def start(done):
        calls.append(done)
        if len(calls) == 1:
            raise InferenceServerException("failed to connect", status="StatusCode.UNAVAILABLE")

    outcomes = run_open_loop(start, 2.0, 1.0, drain_timeout_s=0.01, clock=clock,
                             sleep=clock.sleep)
    assert [o.status for o in outcomes] == ["UNAVAILABLE", "NO_ANSWER"]
    assert math.isinf(outcomes[1].latency_s)


def test_grpc_status_names_the_code():
    assert grpc_status(InferenceServerException("x", status="StatusCode.UNAVAILABLE")) \
        == "UNAVAILABLE"
    assert grpc_status(InferenceServerException("x")) == "UNKNOWN"
    assert grpc_status(RuntimeError("boom")) == "UNKNOWN"


def test_percentiles_are_nearest_rank():
    values = list(range(1, 101))
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile(values, 100) == 100
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))


def test_the_summary_counts_statuses_and_takes_latencies_of_served_requests_only():
    outcomes = [Outcome(0.0, 0.1, OK), Outcome(0.1, 0.3, OK),
                Outcome(0.2, 9.0, "UNAVAILABLE", "Request timeout expired")]
    summary = summarize(outcomes)
    assert summary["requests"] == 3 and summary["ok"] == 2
    assert summary["statuses"] == {OK: 2, "UNAVAILABLE": 1}
    assert summary["p99_ms"] == pytest.approx(300.0) and summary["max_ms"] == pytest.approx(300.0)


def test_outcomes_split_into_equal_spans_of_due_time():
    outcomes = [Outcome(t, 0.1, OK) for t in (0.0, 1.0, 2.0, 3.0, 4.0, 5.0)]
    parts = split_by_time(outcomes, 3)
    assert [[o.due_s for o in p] for p in parts] == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    assert split_by_time([], 3) == [[], [], []]


def test_the_closed_loop_rate_counts_served_calls_per_second_not_errors():
    calls = []

    def call():
        calls.append(1)
        threading.Event().wait(0.01)
        if len(calls) % 2:
            raise RuntimeError("refused")

    rate = closed_loop_rate(call, 2, 0.3, retry_s=0.0)
    assert 0 < rate < 2 / 0.01
    assert rate == pytest.approx(len(calls) / 2 / 0.3, rel=0.5)
    calls.clear()
    closed_loop_rate(call, 2, 0.3, retry_s=0.1)  # a refused caller backs off
    assert len(calls) < 20  # not the 60 of callers that spin
