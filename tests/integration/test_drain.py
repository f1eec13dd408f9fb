"""Stopping a server with liveness sessions open (a pod scaled down or replaced).

Triton 2.51, told to stop, fails an open session's next frame: the sequence still
takes it, but liveness_sequence's BLS call to the face detector is refused. `kyc
serve --drain-secs` first waits, Triton still serving, until the open sessions end
(or go idle, or the time is up), so a session in progress gets its verdict."""

from __future__ import annotations

import signal
import time
import uuid

import pytest

from kyc_client.liveness import LivenessCapture, LivenessReply
from kyc_testing import Person, ServeProcess, perform_on, shipped_copy

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    return shipped_copy(tmp_path_factory.mktemp("drain") / "repo")


def serving(repository, tmp_path, drain_secs: str) -> ServeProcess:
    serve = ServeProcess(repository, tmp_path, "--drain-secs", drain_secs)
    try:
        serve.wait_for_line("Press Ctrl-C to stop.")
    except BaseException:
        serve.close()
        raise
    return serve


def stop_mid_session(serve: ServeProcess) -> tuple[object, float]:
    """START and the first move; SIGTERM to kyc serve; the other moves and END: (END's
    reply or error, when the signal went)."""
    grpc_url = f"127.0.0.1:{serve.ports['grpc']}"
    perform = Person(grpc_url).performer()
    with LivenessCapture(grpc_url, uuid.uuid4().hex) as capture:
        capture.start()
        for frame in perform(None) + perform(capture.challenge["next"]):
            capture.push(frame)
            time.sleep(1 / 15)
        assert all(isinstance(r, LivenessReply) for r in capture.settle())
        serve.proc.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        time.sleep(1.0)  # the person goes on with their moves
        perform_on(capture, perform)
        try:  # the last frame, with END: its face still needs the detector
            return capture.end(perform(None)[0]), stopped
        except Exception as exc:  # the server's answer to END
            return exc, stopped


def test_without_a_drain_triton_fails_the_open_session_when_told_to_stop(repository, tmp_path):
    serve = serving(repository, tmp_path, "0")
    try:
        end, _ = stop_mid_session(serve)
        assert not isinstance(end, LivenessReply)
        assert "Server not ready" in str(end) or "Server is stopping" in str(end), end
    finally:
        serve.close()


def test_kyc_serve_drains_an_open_session_to_its_verdict_then_stops(repository, tmp_path):
    serve = serving(repository, tmp_path, "60")
    try:
        end, stopped = stop_mid_session(serve)
        assert isinstance(end, LivenessReply), end
        assert end.is_live and end.token.startswith(b"kyc2.")
        assert serve.proc.wait(timeout=60) == 0
        waited = time.monotonic() - stopped
        stderr = serve.proc.stderr.read()
        assert "kyc serve: drain ended (drained)" in stderr, stderr
        print(next(line for line in stderr.splitlines() if "drain ended" in line),
              f"stopped {waited:.1f} s after SIGTERM")
        assert waited < 40, f"drained and stopped {waited:.0f} s after SIGTERM"
    finally:
        serve.close()
