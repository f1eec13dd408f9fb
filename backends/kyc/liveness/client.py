"""Client side of ``liveness_sequence``: stream the frames of one session.

One session = one correlation id (``sequence_id``, an integer or a string). The
first request carries ``sequence_start=True`` (its FRAME may be empty: its STATUS
gives the challenge to show the person), the last ``sequence_end=True`` (its
response carries IS_LIVE, LIVENESS_SCORE and LIVENESS_TOKEN). Over one gRPC
stream the responses come back in order.

A session stays on the model version that answered its START: every later frame
names that version. When a new ``liveness_sequence`` version is dropped into the
repository, ``kyc serve`` keeps the old one loaded until its sessions are over
(``kyc.repo.live``), and new sessions start on the new one.
"""

from __future__ import annotations

import json
import queue
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

MODEL = "liveness_sequence"
TIMEOUT_S = 60.0
# Recorded or rendered frames are sent at a camera's pace, not as fast as the server
# answers: a session must last the model's min_duration_s (1 s shipped), which a burst
# of frames from a fast server does not (a film of 21 frames at 15 per second: 1.4 s).
CAMERA_FPS = 15.0


class FramePacer:
    """Waits so that frame k goes out no earlier than k / ``fps`` after the first one
    (``fps`` None or 0: no waiting); ``clock`` and ``sleep`` are injectable for tests."""

    def __init__(self, fps: float | None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Any] = time.sleep) -> None:
        if fps is not None and fps < 0:
            raise ValueError(f"fps must be positive, got {fps}")
        self.interval = 1.0 / fps if fps else 0.0
        self.clock, self.sleep = clock, sleep
        self.first: float | None = None

    def delay_s(self, k: int) -> float:
        """How long to wait before frame ``k`` (0-based); starts the clock at frame 0."""
        now = self.clock()
        if self.first is None:
            self.first = now
        return max(0.0, self.first + k * self.interval - now)

    def wait(self, k: int) -> None:
        delay = self.delay_s(k)
        if delay > 0:
            self.sleep(delay)


@dataclass(frozen=True)
class LivenessReply:
    status: dict
    is_live: bool
    score: float
    token: bytes
    model_version: str = ""  # the version that answered (a session stays on it)

    @classmethod
    def from_result(cls, result: Any) -> LivenessReply:
        return cls(json.loads(result.as_numpy("STATUS")[0, 0]),
                   bool(result.as_numpy("IS_LIVE")[0, 0]),
                   float(result.as_numpy("LIVENESS_SCORE")[0, 0]),
                   bytes(result.as_numpy("LIVENESS_TOKEN")[0, 0]),
                   result.get_response().model_version)


def frame_input(frame: bytes) -> Any:
    import tritonclient.grpc as grpcclient

    tensor = grpcclient.InferInput("FRAME", [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[frame]], dtype=np.object_))
    return tensor


class LivenessStream:
    """One gRPC stream; any number of sessions may share it (each its own id)."""

    def __init__(self, url: str) -> None:
        import tritonclient.grpc as grpcclient

        self.client = grpcclient.InferenceServerClient(url)
        self.replies: queue.Queue = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.replies.put(
            (result, error)))

    def send(self, sequence_id: int | str, frame: bytes, start: bool = False,
             end: bool = False, model_version: str = "") -> None:
        """One frame; ``model_version``: the one that answered START (empty: the newest)."""
        self.client.async_stream_infer(MODEL, [frame_input(frame)], model_version=model_version,
                                       sequence_id=sequence_id, sequence_start=start,
                                       sequence_end=end)

    def receive(self) -> LivenessReply | Exception:
        """The next reply (in the order sent), or the error the server answered."""
        result, error = self.replies.get(timeout=TIMEOUT_S)
        return error if error is not None else LivenessReply.from_result(result)

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()

    def __enter__(self) -> LivenessStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_session(url: str, make_frames: Callable[[dict], Sequence[bytes]],
                sequence_id: int | str | None = None,
                on_reply: Callable[[int, int, LivenessReply], None] | None = None,
                fps: float | None = CAMERA_FPS) -> list[LivenessReply | Exception]:
    """START with no frame; ``make_frames(challenge)`` (what the app asks the person to
    do and films); every frame, at most ``fps`` a second (None: as fast as they go),
    END on the last. One reply per request, START's first (only START's when it
    failed); ``on_reply(k, n, reply)`` sees each frame's reply as it comes
    (progress)."""
    sid = sequence_id if sequence_id is not None else uuid.uuid4().hex
    with LivenessStream(url) as stream:
        stream.send(sid, b"", start=True)
        started = stream.receive()
        if isinstance(started, Exception):
            return [started]
        frames = make_frames(started.status["challenge"])
        pacer = FramePacer(fps)
        for k, frame in enumerate(frames):
            pacer.wait(k)
            stream.send(sid, frame, end=k == len(frames) - 1,
                        model_version=started.model_version)
        replies: list[LivenessReply | Exception] = [started]
        for k in range(len(frames)):
            reply = stream.receive()
            replies.append(reply)
            if on_reply is not None and not isinstance(reply, Exception):
                on_reply(k + 1, len(frames), reply)
        return replies
