"""Liveness load for the benchmark: sessions of ``liveness_sequence`` streamed frame by frame.

:class:`FilmLibrary` renders, once per run, the frames that perform EVERY challenge
the served model can draw (``challenge_length`` moves from its ``moves``, not the
same move all along: 6 films for the shipped ``left,right`` x 3), for one or more
real test photos, with the documented cylinder warp of
:mod:`kyc.liveness.synthetic`. The films are byte for byte what
``turn_sequence(image, box, challenge)`` renders, but each distinct frame (pose and
JPEG variant) is warped and encoded once and shared by the films that hold it:
about 30 encodings per photo instead of 126. They are NOT video of a live person.

:class:`LivenessBenchClient` is one closed-loop client on its own
``tritonclient.grpc.aio`` client: each :meth:`~LivenessBenchClient.next` sends
exactly ONE request of its current session (START with an empty FRAME, a frame,
or the last frame with END) and returns that request's tallies, so that the bench
can time every call as one per-frame latency. After END the next call starts a
new session, with a correlation id of its own.

A session shorter than the model's ``min_duration_s`` (1 s shipped) is not live,
and a client that streams as fast as the server answers may finish a film sooner
(a camera sends 15 to 30 frames a second; a fast server answers hundreds). Before
the last frame, the client therefore sends more frames facing the camera, as a
person holding still would, until the session is old enough (never past
``max_frames``; both limits come with the START response). Each session also
begins with a few frames facing the camera (:func:`lead_in`: 0 to 7, by client and
session), so that clients started together do not turn their heads in the same
batches. Frames per session are thus 1 START + the lead-in + 21 film frames +
whatever filler the server's speed calls for.

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
import itertools
import json
import logging
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kyc.liveness.challenge import parse_moves
from kyc.liveness.client import frame_input
from kyc.liveness.session import LivenessSettings
from kyc.liveness.synthetic import TURN_DEG, encode, frame_variant, head_turn, turn_angles

log = logging.getLogger(__name__)

MODEL = "liveness_sequence"
FACE_MODEL = "face_preprocess"
CLIENT_TIMEOUT_S = 60.0
# The real test photos whose rendered films pass every challenge, in the order
# persons are taken (checked by tests/integration/test_bench_liveness.py).
# Not impostor_1: its face already looks about 10 degrees to its left, and the
# warped left turn moves the estimated yaw only about 12 degrees more (amplitude_deg
# is 12): its films miss that move.
ROLES = ("person_a_2", "person_b_2", "impostor_2", "person_b_1", "person_a_1")
# Client-side margin over min_duration_s (the server's clock starts after START
# is sent and stops after END is sent, so the client's measure is already short).
DURATION_MARGIN_S = 0.05


class LivenessBenchError(RuntimeError):
    """The liveness load could not be prepared or does not fit the served model."""


Challenge = tuple[str, ...]


def possible_challenges(moves: Sequence[str], length: int) -> tuple[Challenge, ...]:
    """Every challenge ``kyc.liveness.challenge.draw_challenge`` can draw: ``length``
    moves from ``moves``, not the same move all along when there is a choice."""
    distinct = tuple(dict.fromkeys(moves))
    return tuple(c for c in itertools.product(distinct, repeat=length)
                 if len(distinct) == 1 or len(set(c)) > 1)


def render_films(image: np.ndarray, box: Sequence[float], challenges: Sequence[Challenge]
                 ) -> tuple[dict[Challenge, tuple[bytes, ...]], tuple[bytes, ...], int]:
    """(film of each challenge, frames facing the camera for filler, distinct frames
    encoded): each film equals ``turn_sequence(image, box, challenge)``; a frame is
    warped once per angle and encoded once per (angle, JPEG variant)."""
    unknown = sorted({m for c in challenges for m in c} - set(TURN_DEG))
    if unknown:
        raise LivenessBenchError(f"the films can show only {', '.join(TURN_DEG)} turns, "
                                 f"not {', '.join(unknown)}")
    turned: dict[float, np.ndarray] = {}
    encoded: dict[tuple[float, int, int], bytes] = {}

    def frame(angle: float, k: int) -> bytes:
        key = (angle, *frame_variant(k))
        if key not in encoded:
            if angle not in turned:
                turned[angle] = head_turn(image, box, angle) if angle else image
            encoded[key] = encode(turned[angle], quality=key[1], shift=key[2])
        return encoded[key]

    films = {c: tuple(frame(a, k) for k, a in enumerate(turn_angles(c))) for c in challenges}
    facing = tuple(dict.fromkeys(b for (a, _, _), b in encoded.items() if a == 0.0))
    return films, facing, len(encoded)


@dataclass(frozen=True)
class PersonFilms:
    """The films of one photo; ``role``: the test photo's name (not personal)."""

    role: str
    films: Mapping[Challenge, tuple[bytes, ...]]
    filler: tuple[bytes, ...]  # frames facing the camera, distinct JPEG variants


class FilmLibrary:
    """Frames for every possible challenge, for ``persons`` real test photos."""

    def __init__(self, persons: Sequence[PersonFilms], challenges: Sequence[Challenge],
                 build_seconds: float = 0.0, encoded_frames: int = 0) -> None:
        if not persons:
            raise LivenessBenchError("a film library needs at least one person")
        self.persons = tuple(persons)
        self.challenges = tuple(challenges)
        self.build_seconds = build_seconds
        self.encoded_frames = encoded_frames

    @classmethod
    def build(cls, grpc_url: str, persons: int = 1,
              challenges: Sequence[Challenge] | None = None) -> FilmLibrary:
        """Films of the first ``persons`` of :data:`ROLES`; the face boxes come from
        the server's ``face_preprocess``, and ``challenges`` by default from the
        served ``liveness_sequence`` config (its ``moves`` and ``challenge_length``)."""
        import tritonclient.grpc as grpcclient
        from PIL import Image

        from kyc.assets.fetch import fetch_test_photos

        if not 1 <= persons <= len(ROLES):
            raise LivenessBenchError(f"persons must be 1 to {len(ROLES)}, not {persons}")
        started = time.perf_counter()
        photos = fetch_test_photos()
        client = grpcclient.InferenceServerClient(grpc_url)
        try:
            if challenges is None:
                challenges = served_challenges(client)
            made, encoded = [], 0
            for role in ROLES[:persons]:
                data = photos[role].read_bytes()
                image = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
                films, filler, count = render_films(image, face_box(client, data, role),
                                                    challenges)
                made.append(PersonFilms(role, films, filler))
                encoded += count
        finally:
            client.close()
        library = cls(made, challenges, time.perf_counter() - started, encoded)
        log.info("liveness films: %d persons x %d challenges of %d frames, %d frames encoded, "
                 "built in %.2f s", persons, len(library.challenges),
                 len(next(iter(made[0].films.values()))), encoded, library.build_seconds)
        return library

    def film(self, person: int, challenge: Sequence[str]) -> tuple[bytes, ...]:
        """The frames performing ``challenge`` (as START's STATUS lists its moves)."""
        films = self.persons[person % len(self.persons)].films
        try:
            return films[tuple(challenge)]
        except KeyError:
            raise LivenessBenchError(
                f"no film for a challenge of {len(challenge)} moves "
                f"{','.join(sorted(set(challenge)))}: the library was built for "
                f"{len(self.challenges)} other challenges") from None

    def filler(self, person: int) -> tuple[bytes, ...]:
        return self.persons[person % len(self.persons)].filler

    def summary(self) -> dict[str, Any]:
        """Counts and timing for a report (no image content)."""
        return {"persons": len(self.persons), "roles": [p.role for p in self.persons],
                "challenges": len(self.challenges),
                "film_frames": len(next(iter(self.persons[0].films.values()))),
                "encoded_frames": self.encoded_frames,
                "build_s": round(self.build_seconds, 3)}


def served_challenges(client: Any) -> tuple[Challenge, ...]:
    """The challenges the served ``liveness_sequence`` can draw (its config's
    ``moves`` and ``challenge_length``, the model's defaults where absent)."""
    config = client.get_model_config(MODEL, as_json=True, client_timeout=CLIENT_TIMEOUT_S)
    params = config.get("config", {}).get("parameters", {})
    defaults = LivenessSettings()
    moves = params.get("moves", {}).get("string_value", defaults.moves)
    length = params.get("challenge_length", {}).get("string_value",
                                                     str(defaults.challenge_length))
    return possible_challenges(parse_moves(moves), int(length))


def face_box(client: Any, data: bytes, role: str) -> np.ndarray:
    """The face box (x1, y1, x2, y2) the served ``face_preprocess`` finds in a photo."""
    import tritonclient.grpc as grpcclient

    tensor = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[data]], dtype=np.object_))
    result = client.infer(FACE_MODEL, [tensor], client_timeout=CLIENT_TIMEOUT_S)
    if not bool(result.as_numpy("FACE_FOUND")[0, 0]):
        raise LivenessBenchError(f"{FACE_MODEL} found no face in the test photo {role}")
    return result.as_numpy("BOX")[0]


# A person settles in front of the camera for a moment before the first move: each
# session begins with 0 to LEAD_IN_MAX - 1 frames facing the camera, different from
# client to client and from session to session. Without it, clients started together
# play the same film frame by frame, and every batch holds 8 turned faces or none
# (a lockstep no population of users keeps).
LEAD_IN_MAX = 8


def lead_in(client: int, session: int) -> int:
    """Frames facing the camera before the film, for a client's ``session``-th session."""
    return (5 * client + 3 * session) % LEAD_IN_MAX


# -- the client ----------------------------------------------------------------------
# Correlation ids: one tag per process, then the client's index and its session
# count, so that ids clash neither between clients nor with another run.
_RUN_TAG = secrets.token_hex(4)


class LivenessBenchClient:
    """One closed-loop liveness client: ``await next()`` sends one request of its
    current session and returns its tallies (see the module docstring)."""

    def __init__(self, grpc_url: str, films: FilmLibrary, index: int, *,
                 timeout_s: float = CLIENT_TIMEOUT_S) -> None:
        self.grpc_url = grpc_url
        self.films = films
        self.index = index
        self.timeout_s = timeout_s
        self._client: Any = None  # made in the event loop, on the first call
        self._sessions = 0  # sessions started (a failed START retries its id)
        self._sid: str | None = None  # id of the session being started or streamed
        self._open = False  # START answered, END not sent yet
        self._film: tuple[bytes, ...] = ()
        self._filler: tuple[bytes, ...] = ()
        self._next_frame = 0  # position in the film
        self._lead_in = 0  # frames facing the camera before the film, this session
        self._sent = 0  # frames sent in this session (film and filler)
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
        status = json.loads(result.as_numpy("STATUS")[0, 0])
        challenge = status["challenge"]
        person = self.index + self._sessions - 1  # clients and sessions rotate persons
        self._open, self._started_at = True, time.monotonic()
        self._next_frame, self._sent = 0, 0
        self._lead_in = lead_in(self.index, self._sessions)
        self._filler = self.films.filler(person)
        self._min_duration_s = float(challenge.get("min_duration_s", 0.0))
        self._max_frames = int(challenge.get("max_frames", 0)) or 1 << 30
        try:
            self._film = self.films.film(person, challenge["moves"])
        except LivenessBenchError:
            self._film, self._min_duration_s = self._filler[:1], 0.0  # END it next call
            raise
        return {"frames": 1}

    def _choose(self) -> tuple[bytes, bool]:
        """The next frame, and whether it ends the session: the film in order, with
        filler facing the camera before its last frame while the session is too
        young to be live."""
        last = len(self._film) - 1
        if self._sent < self._lead_in:
            return self._filler[self._sent % len(self._filler)], False
        if self._next_frame < last:
            self._next_frame += 1
            return self._film[self._next_frame - 1], False
        age = time.monotonic() - self._started_at
        young = self._min_duration_s > 0 and age < self._min_duration_s + DURATION_MARGIN_S
        if young and self._sent < self._max_frames - 1:
            return self._filler[self._sent % len(self._filler)], False
        return self._film[last], True

    async def _infer(self, frame: bytes, start: bool = False, end: bool = False) -> Any:
        if self._client is None:
            from tritonclient.grpc.aio import InferenceServerClient

            self._client = InferenceServerClient(self.grpc_url)
        return await self._client.infer(MODEL, [frame_input(frame)], sequence_id=self._sid,
                                        sequence_start=start, sequence_end=end,
                                        client_timeout=self.timeout_s)
