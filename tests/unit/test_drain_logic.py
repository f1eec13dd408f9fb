"""kyc_tools.operator.drain: when kyc serve may stop Triton without failing open sessions."""

from __future__ import annotations

import threading

from kyc_tools.operator.drain import ServerLoad, drain, parse_server_load

EXPOSITION = """# HELP kyc_liveness_sessions_live Liveness sessions held now
# TYPE kyc_liveness_sessions_live gauge
kyc_liveness_sessions_live{model="liveness_sequence",version="1"} 2
kyc_liveness_sessions_live{model="liveness_sequence",version="2"} 1
nv_inference_request_success{model="liveness_sequence",version="2"} 40
nv_inference_request_failure{model="liveness_sequence",reason="BACKEND",version="2"} 3
nv_inference_request_success{model="face_preprocess",version="1"} 99
nv_inference_pending_request_count{model="face_preprocess",version="1"} 4
nv_inference_pending_request_count{model="liveness_sequence",version="2"} 1
"""


def test_the_exposition_gives_open_sessions_and_liveness_requests_of_every_version():
    assert parse_server_load(EXPOSITION) == ServerLoad(3.0, 43.0, 5.0, answered=142.0)
    assert parse_server_load("nv_inference_request_success{model=\"x\"} 1\n") is None


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def run(loads, **kwargs):
    """drain over a scripted series of readings, one per poll of 1 s."""
    clock, readings = Clock(), iter(loads)

    class Tick(threading.Event):
        def wait(self, timeout=None):
            clock.now += 1.0
            return False

    return drain(lambda: next(readings), interrupted=Tick(), poll_s=1.0, clock=clock, **kwargs)


def test_it_stops_waiting_when_the_last_session_ends_and_nothing_is_pending():
    result = run([ServerLoad(2, 10), ServerLoad(1, 15), ServerLoad(0, 20, pending=2),
                  ServerLoad(0, 20)], deadline_s=60, idle_s=30)
    assert (result.reason, result.waited_s) == ("drained", 3.0)


def test_a_request_in_execution_holds_it_until_no_model_answered_for_the_quiet_time():
    """Triton shows no gauge of requests in execution: answered steps show one in flight."""
    steps = [ServerLoad(0, 0, answered=n) for n in (10, 12, 15, 15, 15, 15)]
    result = run(steps, deadline_s=60, idle_s=30, quiet_s=1.5)
    assert (result.reason, result.waited_s) == ("drained", 4.0)


def test_an_idle_server_still_waits_the_quiet_time_once():
    result = run([ServerLoad(0, 0, answered=7)] * 5, deadline_s=60, idle_s=30, quiet_s=2.0)
    assert (result.reason, result.waited_s) == ("drained", 2.0)


def test_sessions_without_a_frame_for_the_idle_time_do_not_hold_it():
    result = run([ServerLoad(1, 10)] * 10, deadline_s=60, idle_s=3)
    assert (result.reason, result.waited_s, result.open_sessions) == ("sessions_idle", 3.0, 1)


def test_busy_sessions_are_cut_at_the_deadline():
    result = run([ServerLoad(1, n) for n in range(100)], deadline_s=5, idle_s=3)
    assert (result.reason, result.waited_s) == ("deadline", 5.0)


def test_no_metrics_or_a_second_signal_end_the_wait_at_once():
    assert drain(lambda: None, deadline_s=60, idle_s=30).reason == "no_metrics"
    hurry = threading.Event()
    hurry.set()
    result = drain(lambda: ServerLoad(1, 1), deadline_s=60, idle_s=30, interrupted=hurry)
    assert result.reason == "interrupted"
