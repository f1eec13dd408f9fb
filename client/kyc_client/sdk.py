"""Client SDK: ``KycClient`` (blocking) and ``AsyncKycClient`` (asyncio), over gRPC.

    with KycClient("localhost:8001") as kyc:
        session = kyc.liveness_session(perform)       # perform(move or None) -> frames
        result = kyc.verify("document.jpg", "selfie.jpg", session.token)
        print(result.decision, result.reasons)

Images are paths or encoded bytes (JPEG, PNG, WebP). Errors are typed:
:class:`KycInputError` (the server refused this request's input, e.g. an
undecodable image), :class:`KycTimeoutError`, :class:`KycUnavailableError` (no
server, or not ready), :class:`KycAuthError` (the call lacked the server's client key),
:class:`KycServerError` (anything else the server said).

Retries: ``verify``, ``read_document`` and ``find_face`` are stateless and
idempotent, so the SDK retries them when the server answers UNAVAILABLE (a request
shed by admission control or a model's queue policy under overload, a server not
ready yet, a connection refused), with
exponential backoff and jitter, within an overall deadline (:class:`RetryPolicy`;
``retry=NO_RETRY`` turns it off). Nothing else is retried: not bad input
(INVALID_ARGUMENT), not a timeout (the work may still be running), not an internal
error, not a call without the client key (Triton refuses it with UNAVAILABLE too, and
it would be refused again: :class:`KycAuthError`). A liveness session is NEVER retried:
its frames are stateful on the server, so a failed session raises and the app must
start a new one from START.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kyc_client.channel import (
    CLIENT_KEY_ENV,
    CLIENT_KEY_NAME,
    Channel,
    as_channel,
    default_client_key_file,
)
from kyc_client.liveness import (
    CAMERA_FPS,
    MOVE_TRIES,
    AsyncLivenessCapture,
    FramePacer,
    LivenessCapture,
    LivenessReply,
    Perform,
    bytes_input,
    perform_session,
    run_session,
    start_parameters,
)
from kyc_client.verdict import APPLICATION_PARAMETER, verify_verdict

MAX_MOVES = 8  # a session is never told more moves than this (a challenge has 3)

ENTRY_MODEL = "kyc_ensemble"
DEFAULT_TIMEOUT_S = 60.0
Image = bytes | str | Path


class KycError(Exception):
    """Base of the SDK's errors."""


class KycInputError(KycError):
    """The server refused this request's input (bad image, bad token format...)."""


class KycTimeoutError(KycError):
    pass


class KycUnavailableError(KycError):
    pass


class KycServerError(KycError):
    pass


class KycAuthError(KycError):
    """The server answers inference only to calls carrying its client key, and this one
    carried none or another (kyc_client.channel). Never retried."""


# How Triton 2.51 refuses a call without the key of a restricted protocol: gRPC
# UNAVAILABLE "This protocol is restricted, expecting header
# 'triton-grpc-protocol-kyc-client-key'" (HTTP: 403 "This API is restricted, expecting
# header 'kyc-client-key'").
_RESTRICTED = "is restricted, expecting header"


def _missing_client_key() -> KycAuthError:
    return KycAuthError(
        f"the server needs its client key on every inference call ({CLIENT_KEY_NAME}), and "
        f"this call carried none or another: set {CLIENT_KEY_ENV} to the key the server was "
        f"started with (a `kyc serve` on this machine without {CLIENT_KEY_ENV} wrote it to "
        f"{default_client_key_file()}, where clients here read it), or pass it in a "
        "Channel's headers")


def _translate(exc: Exception) -> KycError:
    status = str(getattr(exc, "status", lambda: "")() or "")
    message = exc.message() if hasattr(exc, "message") else str(exc)
    if _RESTRICTED in str(message) and CLIENT_KEY_NAME in str(message):
        return _missing_client_key()
    if "INVALID_ARGUMENT" in status:
        return KycInputError(message)
    if "DEADLINE_EXCEEDED" in status:
        return KycTimeoutError(message)
    if "UNAVAILABLE" in status or "failed to connect" in str(message).lower():
        return KycUnavailableError(message)
    return KycServerError(message)


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to wait before trying a safe request again.

    ``attempts`` tries in all (1: never retry). Before try k+1 (k >= 1) it waits a
    random time in [cap/2, cap], cap = min(max_delay_s, base_delay_s * 2**(k-1))
    ("equal jitter": the waits grow, and clients shed together do not come back
    together). It gives up with the last error when the tries are spent or when the
    next wait would end past ``deadline_s`` after the first try (None: no deadline).
    """

    attempts: int = 4
    base_delay_s: float = 0.1
    max_delay_s: float = 2.0
    deadline_s: float | None = 10.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.base_delay_s < 0 or self.max_delay_s < self.base_delay_s:
            raise ValueError(f"invalid retry policy: {self}")

    def delay_s(self, retry: int, rng: Callable[[], float] = random.random) -> float:
        """The wait before retry number ``retry`` (1 for the first retry)."""
        cap = min(self.max_delay_s, self.base_delay_s * 2.0 ** (retry - 1))
        return cap / 2.0 + rng() * cap / 2.0


NO_RETRY = RetryPolicy(attempts=1)
DEFAULT_RETRY = RetryPolicy()
RETRYABLE: tuple[type[KycError], ...] = (KycUnavailableError,)
T = TypeVar("T")


class _Retries:
    """The tries of one call under ``policy``: after each failure, the wait before the
    next try, or the failure raised again when there is none."""

    def __init__(self, policy: RetryPolicy, clock: Callable[[], float],
                 rng: Callable[[], float]) -> None:
        self.policy, self.clock, self.rng = policy, clock, rng
        self.started, self.tries = clock(), 0

    def wait_after(self, error: KycError) -> float:
        self.tries += 1
        policy = self.policy
        if not isinstance(error, RETRYABLE) or self.tries >= policy.attempts:
            raise error
        wait = policy.delay_s(self.tries, self.rng)
        if policy.deadline_s is not None and self.clock() + wait - self.started > policy.deadline_s:
            raise error
        return wait


def call_with_retries(call: Callable[[], T], policy: RetryPolicy, *,
                      sleep: Callable[[float], None] = time.sleep,
                      clock: Callable[[], float] = time.monotonic,
                      rng: Callable[[], float] = random.random) -> T:
    """``call()`` (which raises :class:`KycError`), tried again per ``policy``."""
    retries = _Retries(policy, clock, rng)
    while True:
        try:
            return call()
        except KycError as error:
            wait = retries.wait_after(error)
        sleep(wait)


async def acall_with_retries(call: Callable[[], Awaitable[T]], policy: RetryPolicy, *,
                             clock: Callable[[], float] = time.monotonic,
                             rng: Callable[[], float] = random.random) -> T:
    """The asyncio form of :func:`call_with_retries`."""
    retries = _Retries(policy, clock, rng)
    while True:
        try:
            return await call()
        except KycError as error:
            wait = retries.wait_after(error)
        await asyncio.sleep(wait)


def _bytes(image: Image) -> bytes:
    return image if isinstance(image, bytes) else Path(image).read_bytes()


@dataclass(frozen=True)
class Verification:
    """What ``kyc_ensemble`` answered."""

    decision: str  # approve, review or reject
    reasons: list[str]
    face_match_score: float
    liveness_score: float
    fraud_score: float
    report: dict = field(repr=False)

    @property
    def approved(self) -> bool:
        return self.decision == "approve"

    def signed(self, public_key: str | bytes, *, application: str | None, **checks) -> dict:
        """The signed REPORT, checked with the server's public key (``kyc verdict
        public-key``), for the ``application`` you gave this verification (None: none);
        ``checks``: :func:`kyc_client.verdict.verify_verdict`'s ``max_age_s``, ``now``,
        ``images``. Raises :class:`kyc_client.verdict.VerdictError` when anything in the report
        was altered, it was signed by another key, or is of another application or too
        old."""
        return verify_verdict(self.report, public_key, application=application, **checks)

    @classmethod
    def from_result(cls, result: Any) -> Verification:
        report = json.loads(result.as_numpy("REPORT")[0, 0])
        return cls(result.as_numpy("DECISION")[0, 0].decode(), list(report["reasons"]),
                   float(result.as_numpy("FACE_MATCH_SCORE")[0, 0]),
                   float(result.as_numpy("LIVENESS_SCORE")[0, 0]),
                   float(result.as_numpy("FRAUD_SCORE")[0, 0]), report)


@dataclass(frozen=True)
class LivenessSession:
    """A finished liveness session: the challenge asked, every reply, the verdict."""

    challenge: dict
    replies: list[LivenessReply]

    @property
    def final(self) -> LivenessReply:
        return self.replies[-1]

    @property
    def is_live(self) -> bool:
        return self.final.is_live

    @property
    def token(self) -> bytes:
        return self.final.token


DOCUMENT_MODEL = "document_ocr"


def _document(result: Any) -> dict:
    """``document_ocr``'s answer: ``document`` (DOCUMENT: ``mrz``, ``fields``,
    ``expired``) and ``lines`` (TEXT_LINES), as the contract gives them."""
    return {"document": json.loads(result.as_numpy("DOCUMENT")[0, 0]),
            "lines": json.loads(result.as_numpy("TEXT_LINES")[0, 0])}


def _document_inputs(grpc: Any, document: Image) -> list:
    return [bytes_input("IMAGE", _bytes(document), grpc)]


def _application(application: str | None) -> dict[str, str] | None:
    """kyc_ensemble's request parameters for ``application`` (kyc_client.verdict)."""
    return {APPLICATION_PARAMETER: application} if application else None


def _verify_inputs(grpc: Any, document: Image, selfie: Image, token: bytes) -> list:
    return [bytes_input(name, value, grpc) for name, value in (
        ("DOCUMENT_IMAGE", _bytes(document)), ("SELFIE_IMAGE", _bytes(selfie)),
        ("LIVENESS_TOKEN", token))]


class KycClient:
    """Blocking client; one per thread (or share it: tritonclient's gRPC client is
    thread-safe for infer)."""

    def __init__(self, url: str | Channel = "localhost:8001",
                 timeout_s: float = DEFAULT_TIMEOUT_S, retry: RetryPolicy = DEFAULT_RETRY):
        import tritonclient.grpc as grpcclient

        self.channel = as_channel(url)  # TLS and headers too (kyc_client.channel)
        self.url, self.timeout_s, self.retry, self._grpc = (self.channel.url, timeout_s, retry,
                                                            grpcclient)
        self._client = self.channel.grpc_client(grpcclient)

    def _infer(self, model: str, inputs: list, parameters: dict | None = None) -> Any:
        """One idempotent request, retried per ``self.retry``."""

        def once() -> Any:
            try:
                return self._client.infer(model, inputs, client_timeout=self.timeout_s,
                                          headers=self.channel.metadata,
                                          parameters=parameters or None)
            except Exception as exc:
                raise _translate(exc) from None

        return call_with_retries(once, self.retry)

    def verify(self, document: Image, selfie: Image, liveness_token: bytes = b"",
               application: str | None = None) -> Verification:
        """``kyc_ensemble`` on one document photo, one selfie and a liveness token (empty:
        no liveness done, which is never approved). ``application``: your reference of
        this application, the one the liveness session was started with (the token is
        bound to it; the signed verdict names it: :meth:`Verification.signed`).
        Retried when shed (UNAVAILABLE)."""
        inputs = _verify_inputs(self._grpc, document, selfie, liveness_token)
        return Verification.from_result(self._infer(ENTRY_MODEL, inputs,
                                                    _application(application)))

    def read_document(self, document: Image) -> dict:
        """``document_ocr`` on one document photo: ``document`` (the MRZ, its checks and
        fields) and ``lines`` (the text lines read). Retried when shed (UNAVAILABLE)."""
        return _document(self._infer(DOCUMENT_MODEL, _document_inputs(self._grpc, document)))

    def find_face(self, image: Image) -> dict:
        """``face_preprocess`` on one image: ``found``, ``box`` (x1, y1, x2, y2 in the
        image as displayed, EXIF applied), ``landmarks`` (five [x, y]: the eyes, the
        nose tip, the mouth corners), ``faces`` and ``quality``. Retried when shed."""
        result = self._infer("face_preprocess", [bytes_input("IMAGE", _bytes(image),
                                                              self._grpc)])
        return _face(result)

    def liveness_session(self, perform: Perform,
                         sequence_id: int | str | None = None,
                         on_reply: Callable[[int, int, LivenessReply], None] | None = None,
                         fps: float | None = CAMERA_FPS, client_id: str | None = None,
                         customer_id: str | None = None,
                         application: str | None = None) -> LivenessSession:
        """START (bound to ``application``, see :meth:`verify`), then ``perform(None)``
        (frames facing the camera) and ``perform(move)`` for each move as the server
        tells it, streamed at a camera's pace (at most ``fps`` a second), END after
        frames facing the camera again
        (:func:`kyc_client.liveness.perform_session`). ``client_id`` / ``customer_id``:
        who starts it (the server bounds the sessions each starts). ``on_reply(k, n,
        reply)`` sees every frame's reply as it comes. Never retried (the session's state
        lives on the server): on an error, start a new session from START."""
        replies = [_checked(r) for r in perform_session(
            self.channel, perform, sequence_id, on_reply, fps, client_id, customer_id,
            application=application)]
        if len(replies) == 1:
            raise KycInputError("no frames to send")
        return LivenessSession(replies[0].status["challenge"], replies)

    def liveness_replay(self, frames: Sequence[bytes], sequence_id: int | str | None = None,
                        fps: float | None = CAMERA_FPS,
                        application: str | None = None) -> LivenessSession:
        """Recorded frames played as they are (for a server loaded with the challenge
        they hold, as ``kyc eval liveness`` does; a served model draws each session's
        challenge, which no recording holds in advance)."""
        replies = [_checked(r) for r in run_session(
            self.channel, lambda _: frames, sequence_id, None, fps,
            start_parameters(application=application))]
        if len(replies) == 1:
            raise KycInputError("no frames to send")
        return LivenessSession(replies[0].status["challenge"], replies)

    def liveness_capture(self, sequence_id: int | str | None = None,
                         client_id: str | None = None, customer_id: str | None = None,
                         application: str | None = None) -> LivenessCapture:
        """A liveness session to stream as a camera films it: START is sent, its
        ``challenge`` (the number of moves and the first one) is there to show; then
        ``push(frame)`` each frame, ``poll()`` the replies (progress: the next move once
        one is done, and the words to show), ``end(frame)`` for the verdict. Close it
        (``with``): a capture closed without END ends its session on the server."""
        capture = LivenessCapture(self.channel, sequence_id, self.timeout_s, client_id,
                                  customer_id, application=application)
        try:
            capture.start()
        except Exception as exc:
            capture.close()
            raise _translate(exc) from None
        return capture

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> KycClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _face(result: Any) -> dict:
    return {"found": bool(result.as_numpy("FACE_FOUND")[0, 0]),
            "box": [float(v) for v in result.as_numpy("BOX")[0]],
            "landmarks": result.as_numpy("LANDMARKS")[0].astype(float).tolist(),
            "faces": int(result.as_numpy("NUM_FACES")[0, 0]),
            "quality": json.loads(result.as_numpy("QUALITY")[0, 0])}


def _checked(reply: LivenessReply | Exception) -> LivenessReply:
    if isinstance(reply, Exception):
        raise _translate(reply)
    return reply


class AsyncKycClient:
    """asyncio client (tritonclient.grpc.aio)."""

    def __init__(self, url: str | Channel = "localhost:8001",
                 timeout_s: float = DEFAULT_TIMEOUT_S, retry: RetryPolicy = DEFAULT_RETRY):
        import tritonclient.grpc as grpcclient
        import tritonclient.grpc.aio as aioclient

        self.channel = as_channel(url)
        self.url, self.timeout_s, self.retry, self._grpc = (self.channel.url, timeout_s, retry,
                                                            grpcclient)
        self._client = self.channel.grpc_client(aioclient)

    async def _infer(self, model: str, inputs: list, parameters: dict | None = None) -> Any:
        """One idempotent request, retried per ``self.retry``."""

        async def once() -> Any:
            try:
                return await self._client.infer(model, inputs, client_timeout=self.timeout_s,
                                                headers=self.channel.metadata,
                                                parameters=parameters or None)
            except Exception as exc:
                raise _translate(exc) from None

        return await acall_with_retries(once, self.retry)

    async def verify(self, document: Image, selfie: Image, liveness_token: bytes = b"",
                     application: str | None = None) -> Verification:
        """As :meth:`KycClient.verify` (retried when shed)."""
        inputs = _verify_inputs(self._grpc, document, selfie, liveness_token)
        return Verification.from_result(await self._infer(ENTRY_MODEL, inputs,
                                                          _application(application)))

    async def read_document(self, document: Image) -> dict:
        """As :meth:`KycClient.read_document` (retried when shed)."""
        return _document(await self._infer(DOCUMENT_MODEL,
                                           _document_inputs(self._grpc, document)))

    async def liveness_capture(self, sequence_id: int | str | None = None,
                               client_id: str | None = None, customer_id: str | None = None,
                               application: str | None = None) -> AsyncLivenessCapture:
        """As :meth:`KycClient.liveness_capture`, for asyncio: ``await push(frame)``,
        ``async for reply in replies()``, ``await end(frame)``; ``await close()``."""
        capture = AsyncLivenessCapture(self.channel, sequence_id, self.timeout_s, client_id,
                                       customer_id, application)
        try:
            await capture.start()
        except Exception as exc:
            await capture.close()
            raise _translate(exc) from None
        return capture

    async def liveness_session(self, perform: Perform,
                               sequence_id: int | str | None = None,
                               fps: float | None = CAMERA_FPS, client_id: str | None = None,
                               customer_id: str | None = None,
                               application: str | None = None) -> LivenessSession:
        """As :meth:`KycClient.liveness_session`: never retried."""
        capture = await self.liveness_capture(sequence_id, client_id, customer_id, application)
        try:
            start = capture.started
            assert start is not None
            replies: list[LivenessReply] = [start]
            pacer, sent = FramePacer(fps), [0]

            async def film(frames: Sequence[bytes]) -> None:
                for frame in frames:
                    delay = pacer.delay_s(sent[0])
                    if delay > 0:
                        await asyncio.sleep(delay)
                    await capture.push(frame)
                    sent[0] += 1

            await film(perform(None))
            move, done, tries = start.status["challenge"].get("next"), 0, 0
            while move is not None and done < MAX_MOVES and tries < MOVE_TRIES:
                await film(perform(move))
                while len(replies) - 1 < sent[0]:
                    replies.append(_checked(await capture.next_reply()))
                progress = replies[-1].status.get("progress", {})
                if progress.get("moves_done", 0) > done:
                    move, done, tries = progress.get("next"), progress["moves_done"], 0
                else:
                    tries += 1  # not seen: made again, as a person told "a little more"
            tail = list(perform(None)) or [b""]
            await film(tail[:-1])
            try:
                await capture.end(tail[-1])
            except Exception as exc:
                raise _translate(exc) from None
            # every frame's reply, END's verdict last (no one read them meanwhile)
            replies += [_checked(r) for r in capture.drain()]
        finally:
            await capture.close()
        return LivenessSession(start.status["challenge"], replies)

    async def close(self) -> None:
        await self._client.close()

    async def __aenter__(self) -> AsyncKycClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
