"""Stopping a server with liveness sessions open (a pod scaled down or replaced).

Triton 2.51, told to stop, fails an open session's next frame: the sequence still
takes it, but liveness_sequence's BLS call to the face detector is refused. `kyc
serve --drain-secs` first waits, Triton still serving, until the open sessions end
(or go idle, or the time is up), so a session in progress gets its verdict."""

from __future__ import annotations

import signal
import time
import uuid

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from PIL import Image
from test_serve_cli import ServeProcess

from kyc.assets.fetch import fetch_test_photos
from kyc.liveness.client import LivenessReply, LivenessStream
from kyc.liveness.synthetic import turn_sequence
from kyc_testing import SHIPPED_REPOSITORY, copy_tree, require_weights

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    require_weights()
    return copy_tree(SHIPPED_REPOSITORY, tmp_path_factory.mktemp("drain") / "repo")


def session_frames(grpc_url: str, challenge: dict) -> list[bytes]:
    photo = fetch_test_photos()["person_a_2"]
    with grpcclient.InferenceServerClient(grpc_url) as client:
        image = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
        image.set_data_from_numpy(np.array([[photo.read_bytes()]], dtype=np.object_))
        box = client.infer("face_preprocess", [image]).as_numpy("BOX")[0]
    return turn_sequence(np.asarray(Image.open(photo).convert("RGB")), box, challenge["moves"])


def serving(repository, tmp_path, drain_secs: str) -> ServeProcess:
    serve = ServeProcess(repository, tmp_path, "--drain-secs", drain_secs)
    try:
        serve.wait_for_line("Press Ctrl-C to stop.")
    except BaseException:
        serve.close()
        raise
    return serve


def stop_mid_session(serve: ServeProcess) -> tuple[object, float]:
    """START and half the frames; SIGTERM to kyc serve; the rest and END: (END's
    reply, when the signal went)."""
    grpc_url = f"127.0.0.1:{serve.ports['grpc']}"
    sid = uuid.uuid4().hex
    with LivenessStream(grpc_url) as stream:
        stream.send(sid, b"", start=True)
        started = stream.receive()
        assert isinstance(started, LivenessReply), started
        frames = session_frames(grpc_url, started.status["challenge"])
        half = len(frames) // 2
        for frame in frames[:half]:
            stream.send(sid, frame)
        for _ in frames[:half]:
            assert isinstance(stream.receive(), LivenessReply)
        serve.proc.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        time.sleep(1.0)  # the person goes on turning their head
        for k, frame in enumerate(frames[half:]):
            stream.send(sid, frame, end=k == len(frames) - half - 1)
        replies = [stream.receive() for _ in frames[half:]]
        return replies[-1], stopped


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
