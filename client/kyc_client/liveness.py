"""Client side of ``liveness_sequence``: stream the frames of one session.

One session = one correlation id (``sequence_id``, an integer or a string). The
first request carries ``sequence_start=True`` (its FRAME may be empty: its STATUS
gives the challenge to show the person), the last ``sequence_end=True`` (its
response carries IS_LIVE, LIVENESS_SCORE and LIVENESS_TOKEN). Over one gRPC
stream the responses come back in order.

A session stays on the model version that answered its START: every later frame
names that version. When a new ``liveness_sequence`` version is dropped into the
repository, ``kyc serve`` keeps the old one loaded until its sessions are over
(``kyc_tools.operator.live``), and new sessions start on the new one.
"""

from __future__ import annotations

import json
import logging
import queue
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kyc_client.channel import Channel, as_channel
from kyc_client.verdict import APPLICATION_PARAMETER

log = logging.getLogger(__name__)

MODEL = "liveness_sequence"
TIMEOUT_S = 60.0
CLOSE_WAIT_S = 5.0  # a closing capture waits this long for its session's END
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


def bytes_input(name: str, data: bytes, grpc: Any = None) -> Any:
    """One BYTES item (an encoded image, a token) as a [1, 1] input tensor; ``grpc``: the
    tritonclient module to make it with (``tritonclient.grpc`` by default, or its aio)."""
    if grpc is None:
        import tritonclient.grpc as grpc

    tensor = grpc.InferInput(name, [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[data]], dtype=np.object_))
    return tensor


def frame_input(frame: bytes) -> Any:
    return bytes_input("FRAME", frame)


def start_parameters(client_id: str | None = None, customer_id: str | None = None,
                     application: str | None = None) -> dict[str, str]:
    """START's request parameters: who starts the session, so that the server can bound
    the sessions one client (an address, a device) or one customer (the operator's
    applicant id) starts in a while (the server keeps only salted digests of them); and
    the application the token will serve (kyc_client.verdict: the token is bound to it)."""
    out = {APPLICATION_PARAMETER: application} if application else {}
    if client_id:
        out["kyc_client"] = str(client_id)
    if customer_id:
        out["kyc_customer"] = str(customer_id)
    return out


class LivenessStream:
    """One gRPC stream; any number of sessions may share it (each its own id)."""

    def __init__(self, url: str | Channel) -> None:
        import tritonclient.grpc as grpcclient

        channel = as_channel(url)
        self.client = channel.grpc_client(grpcclient)
        self.replies: queue.Queue = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.replies.put(
            (result, error)), headers=channel.metadata)

    def send(self, sequence_id: int | str, frame: bytes, start: bool = False,
             end: bool = False, model_version: str = "",
             parameters: dict[str, str] | None = None) -> None:
        """One frame; ``model_version``: the one that answered START (empty: the newest);
        ``parameters``: the request's own (START's :func:`start_parameters`)."""
        self.client.async_stream_infer(MODEL, [frame_input(frame)], model_version=model_version,
                                       sequence_id=sequence_id, sequence_start=start,
                                       sequence_end=end, parameters=parameters or None)

    def receive(self, timeout_s: float = TIMEOUT_S) -> LivenessReply | Exception:
        """The next reply (in the order sent), or the error the server answered;
        ``queue.Empty`` when none comes within ``timeout_s`` (0: only one already here)."""
        result, error = (self.replies.get(timeout=timeout_s) if timeout_s > 0
                         else self.replies.get_nowait())
        return error if error is not None else LivenessReply.from_result(result)

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()

    def __enter__(self) -> LivenessStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LivenessCapture:
    """One liveness session streamed as a camera films it (blocking form).

    ``start()`` sends START and returns its reply (``challenge``: what to show the
    person); ``push(frame)`` sends each frame as the camera makes it, without waiting;
    ``poll()`` gives the replies that have come since (findings and progress, to guide
    the person live); ``end(frame)`` sends the last frame with END and returns the
    verdict (``is_live``, ``score``, ``token``, ``status["reasons"]``). Every frame
    goes to the model version that answered START. A frame the server refuses gets its
    own error reply; the session goes on. One gRPC stream per capture.
    """

    def __init__(self, url: str | Channel, sequence_id: int | str | None = None,
                 timeout_s: float = TIMEOUT_S, client_id: str | None = None,
                 customer_id: str | None = None, parameters: dict | None = None,
                 application: str | None = None) -> None:
        self.sequence_id = sequence_id if sequence_id is not None else uuid.uuid4().hex
        self.timeout_s = timeout_s
        self.parameters = {**start_parameters(client_id, customer_id, application),
                           **(parameters or {})}
        self.started: LivenessReply | None = None
        self.progress: dict = {}  # the latest reply's progress (moves_done, next...)
        self._stream = LivenessStream(url)
        self._pending = 0  # requests sent whose reply has not been taken from the stream
        self._ready: list[LivenessReply | Exception] = []  # taken, not yet polled
        self._ended = False

    @property
    def challenge(self) -> dict:
        if self.started is None:
            raise RuntimeError("start() the capture first")
        return self.started.status["challenge"]

    def start(self) -> LivenessReply:
        """START; raises the server's error (e.g. UNAVAILABLE: too many sessions)."""
        self._stream.send(self.sequence_id, b"", start=True, parameters=self.parameters)
        reply = self._stream.receive(self.timeout_s)
        if isinstance(reply, Exception):
            raise reply
        self.started, self.progress = reply, reply.status.get("progress", {})
        return reply

    def push(self, frame: bytes) -> None:
        """Send one frame now; its reply comes through :meth:`poll`."""
        self._send(frame, end=False)

    def poll(self) -> list[LivenessReply | Exception]:
        """The replies that have come since the last call, in the order sent."""
        while self._pending:
            try:
                self._take(self._stream.receive(0.0))
            except queue.Empty:
                break
            self._pending -= 1
        ready, self._ready = self._ready, []
        return ready

    def _take(self, reply: LivenessReply | Exception) -> None:
        self._ready.append(reply)
        if not isinstance(reply, Exception) and reply.status.get("progress"):
            self.progress = reply.status["progress"]

    def settle(self) -> list[LivenessReply | Exception]:
        """Wait for the replies of every frame sent, and give those not polled yet."""
        while self._pending:
            self._take(self._stream.receive(self.timeout_s))
            self._pending -= 1
        ready, self._ready = self._ready, []
        return ready

    def end(self, frame: bytes = b"") -> LivenessReply:
        """Send ``frame`` (may be empty) with END and wait for the verdict; the replies of
        earlier frames that come meanwhile stay for :meth:`poll`."""
        self._send(frame, end=True)
        self._ended = True
        while self._pending:
            self._take(self._stream.receive(self.timeout_s))
            self._pending -= 1
        final = self._ready.pop()
        if isinstance(final, Exception):
            raise final
        return final

    def _send(self, frame: bytes, end: bool) -> None:
        if self.started is None:
            raise RuntimeError("start() the capture first")
        self._stream.send(self.sequence_id, frame, end=end,
                          model_version=self.started.model_version)
        self._pending += 1

    def close(self) -> None:
        """Close the stream; a session started and not ended is ended first (an empty
        END, its verdict unread), so the server frees it at once rather than when it
        has been idle for ``idle_ttl_s``. The stream's close waits for that END."""
        if self.started is not None and not self._ended:
            self._ended = True
            try:
                self._send(b"", end=True)
            except Exception:  # the stream already broke: the server evicts it idle
                log.debug("liveness capture: END on close not sent", exc_info=True)
        self._stream.close()

    def __enter__(self) -> LivenessCapture:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncLivenessCapture:
    """:class:`LivenessCapture` for asyncio (``tritonclient.grpc.aio``): ``await
    start()``, ``await push(frame)``, ``async for reply in replies()`` (as they come,
    until END's), ``await end(frame)``. Use ``async with``."""

    def __init__(self, url: str | Channel, sequence_id: int | str | None = None,
                 timeout_s: float = TIMEOUT_S, client_id: str | None = None,
                 customer_id: str | None = None, application: str | None = None) -> None:
        import asyncio

        import tritonclient.grpc.aio as aioclient

        self.sequence_id = sequence_id if sequence_id is not None else uuid.uuid4().hex
        self.timeout_s = timeout_s
        self.parameters = start_parameters(client_id, customer_id, application)
        self.started: LivenessReply | None = None
        self._channel = as_channel(url)
        self._client = self._channel.grpc_client(aioclient)
        self._requests: asyncio.Queue = asyncio.Queue()
        self._replies: asyncio.Queue = asyncio.Queue()
        self._pump: asyncio.Task | None = None
        self._ended = False

    @property
    def challenge(self) -> dict:
        if self.started is None:
            raise RuntimeError("start() the capture first")
        return self.started.status["challenge"]

    async def start(self) -> LivenessReply:
        import asyncio

        self._pump = asyncio.create_task(self._read())
        await self._requests.put(self._request(b"", start=True))
        reply = await asyncio.wait_for(self._replies.get(), self.timeout_s)
        if isinstance(reply, Exception):
            raise reply
        self.started = reply
        return reply

    async def push(self, frame: bytes) -> None:
        await self._requests.put(self._request(frame))

    async def replies(self):
        """Each reply of a pushed frame as it comes, END's verdict included (which
        :meth:`end` also returns); stops when the stream closes."""
        import asyncio

        while True:
            reply = await asyncio.wait_for(self._replies.get(), self.timeout_s)
            if reply is _CLOSED:
                return
            yield reply

    async def end(self, frame: bytes = b"") -> LivenessReply:
        """Send ``frame`` (may be empty) with END and wait for the verdict; the replies
        of earlier frames go through :meth:`replies` (or :meth:`drain`)."""
        import asyncio

        self._ended = True
        await self._requests.put(self._request(frame, end=True))
        await self._requests.put(None)
        if self._pump is None:
            raise RuntimeError("start() the capture first")
        final = await asyncio.wait_for(self._pump, self.timeout_s)
        if isinstance(final, Exception):
            raise final
        return final

    async def next_reply(self) -> LivenessReply | Exception:
        """The next reply of a pushed frame (in the order sent)."""
        import asyncio

        reply = await asyncio.wait_for(self._replies.get(), self.timeout_s)
        if reply is _CLOSED:
            raise ConnectionError("the liveness stream closed")
        return reply

    def drain(self) -> list[LivenessReply | Exception]:
        """The replies that have come and were not taken by :meth:`replies`."""
        out = []
        while not self._replies.empty():
            reply = self._replies.get_nowait()
            if reply is not _CLOSED:
                out.append(reply)
        return out

    def _request(self, frame: bytes, start: bool = False, end: bool = False) -> dict:
        request = {"model_name": MODEL, "inputs": [frame_input(frame)],
                   "model_version": self.started.model_version if self.started else "",
                   "sequence_id": self.sequence_id, "sequence_start": start,
                   "sequence_end": end}
        if start and self.parameters:
            request["parameters"] = self.parameters
        return request

    async def _requests_sent(self):
        while True:
            request = await self._requests.get()
            if request is None:
                return
            yield request

    async def _read(self) -> LivenessReply | Exception | None:
        """Every reply into the queue; returns the last one (END's verdict)."""
        last = None
        try:
            async for result, error in self._client.stream_infer(self._requests_sent(),
                                                                 headers=self._channel.metadata):
                last = error if error is not None else LivenessReply.from_result(result)
                await self._replies.put(last)
        except Exception as exc:  # the stream broke: its error is the last reply
            last = exc
            await self._replies.put(exc)
        finally:
            await self._replies.put(_CLOSED)
        return last

    async def close(self) -> None:
        """As :meth:`LivenessCapture.close`: a session not ended is ended first."""
        import asyncio

        if self._pump is not None and not self._pump.done():
            if self.started is not None and not self._ended:
                self._ended = True
                await self._requests.put(self._request(b"", end=True))
            await self._requests.put(None)
            try:
                await asyncio.wait_for(asyncio.shield(self._pump), CLOSE_WAIT_S)
            except Exception:  # no END's answer in time, or the stream broke
                self._pump.cancel()
        await self._client.close()

    async def __aenter__(self) -> AsyncLivenessCapture:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


_CLOSED = object()


Perform = Callable[[str | None], Sequence[bytes]]
MOVE_TRIES = 3  # a move not seen is made again, as a person told "a little more" does


def perform_session(url: str | Channel, perform: Perform, sequence_id: int | str | None = None,
                    on_reply: Callable[[int, int, LivenessReply], None] | None = None,
                    fps: float | None = CAMERA_FPS, client_id: str | None = None,
                    customer_id: str | None = None, max_moves: int = 8,
                    application: str | None = None) -> list[LivenessReply | Exception]:
    """A session as an app runs it with a person in front of the camera: START, then
    ``perform(None)`` (frames facing the camera), then for each move as the server tells
    it (START's ``challenge.next``, then each reply's ``progress.next``) the frames of
    ``perform(move)``, waiting for the server's word after each; when no move is left,
    or a move was not seen, ``perform(None)`` again with END on its last frame. At most
    ``fps`` frames a second. One reply per request, START's first (only START's when it
    failed); ``on_reply(k, n, reply)`` sees each frame's reply (``n``: frames so far)."""
    with LivenessCapture(url, sequence_id, client_id=client_id, customer_id=customer_id,
                         application=application) as capture:
        try:
            started = capture.start()
        except Exception as exc:  # the server's answer to START
            return [exc]
        replies: list[LivenessReply | Exception] = [started]
        pacer, sent = FramePacer(fps), [0]

        def take(ready: list[LivenessReply | Exception]) -> None:
            for reply in ready:
                replies.append(reply)
                if on_reply is not None and not isinstance(reply, Exception):
                    on_reply(len(replies) - 1, sent[0], reply)

        def film(frames: Sequence[bytes]) -> None:
            for frame in frames:
                pacer.wait(sent[0])
                capture.push(frame)
                sent[0] += 1
                take(capture.poll())

        film(perform(None))
        move, done, tries = started.status["challenge"].get("next"), 0, 0
        for _ in range(max_moves + MOVE_TRIES):
            if move is None:
                break
            film(perform(move))
            ready = capture.settle()
            take(ready)
            told = [r.status.get("progress", {}) for r in ready if not isinstance(r, Exception)]
            if told and told[-1].get("moves_done", 0) > done:
                move, done, tries = told[-1].get("next"), told[-1]["moves_done"], 0
            elif tries + 1 >= MOVE_TRIES:
                break  # the move was not seen: the verdict will say so
            else:
                tries += 1  # as a person told "a little more" does it again
        tail = list(perform(None)) or [b""]
        film(tail[:-1])
        pacer.wait(sent[0])
        sent[0] += 1
        take(_ended(capture, tail[-1]))
        return replies


def run_session(url: str | Channel, make_frames: Callable[[dict], Sequence[bytes]],
                sequence_id: int | str | None = None,
                on_reply: Callable[[int, int, LivenessReply], None] | None = None,
                fps: float | None = CAMERA_FPS, parameters: dict | None = None
                ) -> list[LivenessReply | Exception]:
    """A recording played as it is: START with no frame; ``make_frames(challenge)``
    (START's STATUS ``challenge``: the first move only, so this is for frames made
    beforehand, e.g. a recorded clip played to a server loaded with the challenge it
    holds, as ``kyc eval liveness`` does; a person is filmed with
    :func:`perform_session`); every frame, at most ``fps`` a second (None: as fast as
    they go), END on the last, through a :class:`LivenessCapture`. One reply per
    request, START's first (only START's when it failed); ``on_reply(k, n, reply)``
    sees each frame's reply as it comes (progress). ``parameters``: START's request
    parameters (``kyc_challenge`` for a server measuring recordings)."""
    with LivenessCapture(url, sequence_id, parameters=parameters) as capture:
        try:
            started = capture.start()
        except Exception as exc:  # the server's answer to START
            return [exc]
        frames = list(make_frames(started.status["challenge"]))
        replies: list[LivenessReply | Exception] = [started]

        def take(ready: list[LivenessReply | Exception]) -> None:
            for reply in ready:
                replies.append(reply)
                if on_reply is not None and not isinstance(reply, Exception):
                    on_reply(len(replies) - 1, len(frames), reply)

        pacer = FramePacer(fps)
        for k, frame in enumerate(frames[:-1]):
            pacer.wait(k)
            capture.push(frame)
            take(capture.poll())
        if frames:
            pacer.wait(len(frames) - 1)
            take(_ended(capture, frames[-1]))
        return replies


def _ended(capture: LivenessCapture, frame: bytes) -> list[LivenessReply | Exception]:
    """END with ``frame``: the replies still to come, the verdict (or the server's
    answer to END) last."""
    try:
        final: LivenessReply | Exception = capture.end(frame)
    except Exception as exc:  # the server's answer to END
        final = exc
    return [*capture.poll(), final]
