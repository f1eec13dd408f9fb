"""Liveness load for the benchmark: sessions of ``liveness_sequence`` streamed frame by frame.

:class:`MoveLibrary` renders, once per run, the frames of EACH single move of the
vocabulary (:data:`kyc.liveness.challenge.MOVES`), for one or more real test photos,
as 3-D head turns on the canonical face mesh (:class:`kyc_tools.dev.synthetic.liveness.HeadModel`,
the face's five landmarks from the served ``face_preprocess``): a move's segment is
what ``Performer(head)(move)`` renders (``move_poses(move)``: on the way, held, back,
facing), plus filler frames facing the camera. Each distinct frame (pose and JPEG
variant) is rendered and encoded once and shared by the segments that hold it: 28
encodings per photo. They are NOT video of a live person.

:class:`LivenessBenchClient` is one closed-loop client on its own
``tritonclient.grpc.aio`` client: each :meth:`~LivenessBenchClient.next` sends
exactly ONE request of its current session (START with an empty FRAME, a frame,
or the last frame with END) and returns that request's tallies, so that the bench
can time every call as one per-frame latency. After END the next call starts a
new session, with a correlation id of its own.

A session is played as a person makes it, move by move. START tells the first move
(``challenge.next``); after the segment of each move the client reads the replies'
``progress``: once ``moves_done`` has grown and ``next`` names a move, it plays that
move's segment; while the move just made is not counted yet it sends frames facing
the camera, and gives up after :data:`MAX_WAIT_FRAMES` of them (END: the session is
not live, as an app would time out). A server of the previous protocol, whose START
lists every move (``challenge.moves``), is played the same way without waiting: the
next move comes from that list instead of the replies, so that the old and the new
server can be measured side by side.

A session shorter than the model's ``min_duration_s`` (1 s shipped) is not live,
and a client that streams as fast as the server answers may finish its moves sooner
(a camera sends 15 to 30 frames a second; a fast server answers hundreds). Once every
move is made, the client therefore sends more frames facing the camera, as a person
holding still would, until the session is old enough, then END on one of them (never
past ``max_frames``; both limits come with the START response). Each session also
begins with a few frames facing the camera (:func:`lead_in`: 0 to 7, by client and
session) before the facing frames of ``move_poses(None)``, so that clients started
together do not turn their heads in the same batches. Frames per session are thus
1 START + the lead-in + 3 facing + 8 per move + whatever filler the server's speed
calls for + END.

Failures: a request that fails raises from ``next()`` (the bench counts it). A
failed START is retried by the next call with the same id (a START resets a
sequence); a failed frame is skipped and the session goes on, as a camera app's
would; after END, answered or not, a new session starts. :meth:`close` ends an
open session with END first, so that none is left idle on the server when the
bench stops mid-session. A session abandoned otherwise (a client never closed) is
dropped by Triton after ``max_sequence_idle_microseconds`` and its state by the
model after ``idle_ttl_s``.

Logs and tallies carry counts only: never frames, tokens, poses or embeddings.
"""

from __future__ import annotations

import io
import json
import logging
import secrets
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kyc.liveness.challenge import MOVES
from kyc_client.channel import as_channel
from kyc_client.liveness import frame_input
from kyc_tools.dev.synthetic.liveness import HeadModel, encode, frame_variant, move_pose, move_poses

log = logging.getLogger(__name__)

MODEL = "liveness_sequence"
LIVENESS_DESCRIPTION = ("one frame of a liveness session (a real photo's face rendered in 3-D, "
                        "making each move as it is told) -> liveness_sequence; N sessions "
                        "streaming at once")
CLIENT_TIMEOUT_S = 60.0
# The real test photos whose rendered moves pass the served model, in the order
# persons are taken (checked by tests/integration/test_bench_liveness.py: eight
# clients, one session each, play every one). All six: the 3-D head turns impostor_1,
# whose face already looks about 10 degrees to its left, as far as the others.
ROLES = ("person_a_2", "person_b_2", "impostor_2", "person_b_1", "person_a_1", "impostor_1")
# Client-side margin over min_duration_s (the server's clock starts after START
# is sent and stops after END is sent, so the client's measure is already short).
DURATION_MARGIN_S = 0.05
# Frames facing the camera of distinct JPEG variants (frame_variant 0 to 7): the
# lead-in, the padding and the wait for a move to be counted cycle through them.
FILLER_FRAMES = 8
# A move the server has not counted after this many frames facing the camera is given
# up: the session ends (not live), as an app stops waiting for a person.
MAX_WAIT_FRAMES = 30


class LivenessBenchError(RuntimeError):
    """The liveness load could not be prepared or does not fit the served model."""


Segments = Mapping[str | None, tuple[bytes, ...]]


def render_segments(head: HeadModel, moves: Sequence[str], filler: int = FILLER_FRAMES
                    ) -> tuple[dict[str | None, tuple[bytes, ...]], tuple[bytes, ...], int]:
    """(frames of each move, None: facing the camera; ``filler`` frames facing the
    camera; distinct frames encoded): each segment equals what a fresh
    ``Performer(head)(move)`` renders, but a frame is encoded once per (pose, JPEG
    variant), whichever segments hold it (the facing frames, mostly)."""
    encoded: dict[tuple[float, float, int, int], bytes] = {}

    def frame(pose: tuple[float, float], k: int) -> bytes:
        key = (*pose, *frame_variant(k))
        if key not in encoded:
            encoded[key] = encode(head.render(*pose), quality=key[2], shift=key[3])
        return encoded[key]

    segments = {move: tuple(frame(pose, k) for k, pose in enumerate(move_poses(move)))
                for move in (None, *moves)}
    facing = tuple(frame(move_pose(None), k) for k in range(filler))
    return segments, facing, len(encoded)


@dataclass(frozen=True)
class PersonMoves:
    """The frames of one photo; ``role``: the test photo's name (not personal)."""

    role: str
    segments: Segments  # each move's frames; None: the frames facing the camera first
    filler: tuple[bytes, ...]  # frames facing the camera, distinct JPEG variants


class MoveLibrary:
    """The frames of every move, for ``persons`` real test photos."""

    def __init__(self, persons: Sequence[PersonMoves], build_seconds: float = 0.0,
                 encoded_frames: int = 0) -> None:
        if not persons:
            raise LivenessBenchError("a move library needs at least one person")
        self.persons = tuple(persons)
        self.build_seconds = build_seconds
        self.encoded_frames = encoded_frames

    @classmethod
    def build(cls, grpc_url: str, persons: int = 1) -> MoveLibrary:
        """The moves of the first ``persons`` of :data:`ROLES`, every move of the
        vocabulary (a server tells only moves of it); the face landmarks come from the
        server's ``face_preprocess``."""
        from kyc_tools.dev.synthetic.liveness import load_mesh

        if not 1 <= persons <= len(ROLES):
            raise LivenessBenchError(f"persons must be 1 to {len(ROLES)}, not {persons}")
        started = time.perf_counter()
        mesh = load_mesh()
        made, encoded = [], 0
        roles = ROLES[:persons]
        for role, (image, landmarks) in zip(roles, _faces(grpc_url, roles), strict=True):
            segments, filler, count = render_segments(HeadModel(image, landmarks, mesh),
                                                      tuple(MOVES))
            made.append(PersonMoves(role, segments, filler))
            encoded += count
        library = cls(made, time.perf_counter() - started, encoded)
        log.info("liveness moves: %d persons x %d moves, %d frames encoded, built in %.2f s",
                 persons, len(MOVES), encoded, library.build_seconds)
        return library

    def segment(self, person: int, move: str | None) -> tuple[bytes, ...]:
        """The frames of ``move`` (None: facing the camera) for the ``person``-th photo."""
        segments = self._person(person).segments
        try:
            return segments[move]
        except KeyError:
            raise LivenessBenchError(
                f"no frames for the move {move!r}: the library has "
                f"{', '.join(m for m in segments if m)}") from None

    def filler(self, person: int) -> tuple[bytes, ...]:
        return self._person(person).filler

    def _person(self, person: int) -> PersonMoves:
        return self.persons[person % len(self.persons)]


def _faces(grpc_url: str, roles: Sequence[str]) -> list[tuple[np.ndarray, list]]:
    """(RGB image, five landmarks from the served ``face_preprocess``) of each photo."""
    from PIL import Image

    from kyc_client.sdk import KycClient
    from kyc_tools.assets.fetch import fetch_test_photos

    photos, faces = fetch_test_photos(), []
    with KycClient(grpc_url, timeout_s=CLIENT_TIMEOUT_S) as client:
        for role in roles:
            data = photos[role].read_bytes()
            face = client.find_face(data)
            if not face["found"]:
                raise LivenessBenchError(f"face_preprocess found no face in the test photo "
                                         f"{role}")
            image = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
            faces.append((image, face["landmarks"]))
    return faces


# A person settles in front of the camera for a moment before the first move: each
# session begins with 0 to LEAD_IN_MAX - 1 frames facing the camera, different from
# client to client and from session to session. Without it, clients started together
# play the same frames in step, and every batch holds 8 turned faces or none
# (a lockstep no population of users keeps).
LEAD_IN_MAX = 8


def lead_in(client: int, session: int) -> int:
    """Frames facing the camera before the first ones, for a client's ``session``-th
    session."""
    return (5 * client + 3 * session) % LEAD_IN_MAX


# -- the client ----------------------------------------------------------------------
# Correlation ids: one tag per process, then the client's index and its session
# count, so that ids clash neither between clients nor with another run.
_RUN_TAG = secrets.token_hex(4)


class LivenessBenchClient:
    """One closed-loop liveness client: ``await next()`` sends one request of its
    current session and returns its tallies (see the module docstring)."""

    def __init__(self, grpc_url: str, library: MoveLibrary, index: int, *,
                 timeout_s: float = CLIENT_TIMEOUT_S) -> None:
        self.grpc_url = grpc_url
        self.channel = as_channel(grpc_url)  # with the client key found here
        self.library = library
        self.index = index
        self.timeout_s = timeout_s
        self._client: Any = None  # made in the event loop, on the first call
        self._sessions = 0  # sessions started (a failed START retries its id)
        self._sid: str | None = None  # id of the session being started or streamed
        self._open = False  # START answered, END not sent yet
        self._person = 0  # which photo plays this session
        self._filler: tuple[bytes, ...] = ()
        self._queue: deque[bytes] = deque()  # frames to send before choosing again
        self._told: list[str] = []  # the moves known so far, in order
        self._all_told = False  # no move after the told ones
        self._upfront = False  # START told every move (the previous protocol)
        self._played = 0  # moves whose segment was queued
        self._waited = 0  # frames facing the camera since the last move was told
        self._give_up = False  # END with the next frame
        self._sent = 0  # frames sent in this session
        self._started_at = 0.0
        self._min_duration_s = 0.0
        self._max_frames = 0

    @property
    def session_id(self) -> str | None:
        return self._sid

    async def next(self) -> Mapping[str, int]:
        """Send ONE request (START, a frame, or the last frame with END) and return
        its tallies: ``{"frames": 1}``, plus ``sessions`` and ``sessions_live`` at END.
        Raises what the request raised."""
        if not self._open:
            return await self._start()
        frame, end = self._choose()
        self._sent += 1
        try:
            result = await self._infer(frame, end=end)
        finally:
            if end:
                self._open = False
                self._sid = None
        if not end:
            self._hear(json.loads(result.as_numpy("STATUS")[0, 0]).get("progress") or {})
            return {"frames": 1}
        is_live = bool(result.as_numpy("IS_LIVE")[0, 0])
        return {"frames": 1, "sessions": 1, "sessions_live": int(is_live)}

    async def abort(self) -> bool:
        """End an open session with END (on a frame facing the camera), so that the
        server holds nothing for it; whether there was one. Errors are logged (as a
        type), not raised: this runs when the bench stops."""
        if not self._open:
            return False
        self._open = False
        try:
            await self._infer(self._filler[0], end=True)
        except Exception as exc:  # stopping: the server drops it when idle anyway
            log.warning("liveness client %d: END of an open session failed: %s", self.index,
                        type(exc).__name__)
        self._sid = None
        return True

    async def close(self) -> None:
        """End the open session (see :meth:`abort`), then close the gRPC client."""
        try:
            await self.abort()
        finally:
            if self._client is not None:
                client, self._client = self._client, None
                await client.close()

    # -- internals ------------------------------------------------------------------
    async def _start(self) -> Mapping[str, int]:
        if self._sid is None:  # a failed START keeps its id: a START resets a sequence
            self._sessions += 1
            self._sid = f"bench-{_RUN_TAG}-{self.index}-{self._sessions}"
        result = await self._infer(b"", start=True)
        challenge = json.loads(result.as_numpy("STATUS")[0, 0])["challenge"]
        self._person = self.index + self._sessions - 1  # clients and sessions rotate persons
        self._filler = self.library.filler(self._person)
        self._open, self._started_at = True, time.monotonic()
        self._sent = self._played = self._waited = 0
        self._upfront, self._told = "moves" in challenge, []
        self._all_told, self._give_up = self._upfront, False
        self._min_duration_s = float(challenge.get("min_duration_s", 0.0))
        self._max_frames = int(challenge.get("max_frames", 0)) or 1 << 30
        lead = lead_in(self.index, self._sessions)
        self._queue = deque(self._filler[k % len(self._filler)] for k in range(lead))
        self._queue.extend(self.library.segment(self._person, None))
        for move in challenge["moves"] if self._upfront else [challenge["next"]]:
            self._tell(move)
        return {"frames": 1}

    def _tell(self, move: str) -> None:
        """One more move to make (checked against the library; an unknown one ends
        the session with the next frame, and raises)."""
        try:
            self.library.segment(self._person, move)
        except LivenessBenchError:
            self._give_up = True
            raise
        self._told.append(move)
        self._waited = 0

    def _hear(self, progress: Mapping[str, Any]) -> None:
        """A reply's progress: once the last move told is counted, the next one (None:
        every move is made)."""
        if self._upfront or self._all_told:  # every move is known: nothing to hear
            return
        if progress.get("moves_done") == len(self._told):
            if progress.get("next") is None:
                self._all_told = True
            else:
                self._tell(progress["next"])

    def _choose(self) -> tuple[bytes, bool]:
        """The next frame, and whether it ends the session: what is queued, else the
        next move's segment, else frames facing the camera while a move is not counted
        yet or while the session is too young to be live."""
        if self._give_up or self._sent >= self._max_frames - 1:
            return self._facing(), True
        if not self._queue and self._played < len(self._told):
            self._queue.extend(self.library.segment(self._person, self._told[self._played]))
            self._played += 1
        if self._queue:
            return self._queue.popleft(), False
        if not self._all_told:  # the move made is not counted yet
            self._waited += 1
            return self._facing(), self._waited > MAX_WAIT_FRAMES
        age = time.monotonic() - self._started_at
        young = self._min_duration_s > 0 and age < self._min_duration_s + DURATION_MARGIN_S
        return self._facing(), not young

    def _facing(self) -> bytes:
        return self._filler[self._sent % len(self._filler)]

    async def _infer(self, frame: bytes, start: bool = False, end: bool = False) -> Any:
        if self._client is None:
            import tritonclient.grpc.aio as aioclient

            self._client = self.channel.grpc_client(aioclient)
        return await self._client.infer(MODEL, [frame_input(frame)], sequence_id=self._sid,
                                        sequence_start=start, sequence_end=end,
                                        client_timeout=self.timeout_s,
                                        headers=self.channel.metadata)
