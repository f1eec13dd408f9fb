"""The liveness load of the benchmark: the frames of each move, played as they are told,
one request per call.

The frames are NOT video of a live person: real test photos' faces rendered as 3-D
head turns on the canonical face mesh (kyc_tools.dev.synthetic.liveness).
"""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from kyc.liveness.challenge import MOVES
from kyc_tools.dev.bench import liveness as bench_liveness
from kyc_tools.dev.bench.liveness import (
    FILLER_FRAMES,
    LEAD_IN_MAX,
    MAX_WAIT_FRAMES,
    MODEL,
    ROLES,
    LivenessBenchClient,
    LivenessBenchError,
    MoveLibrary,
    PersonMoves,
    lead_in,
    render_segments,
)
from kyc_tools.dev.synthetic.liveness import HOLD, RAMP, HeadModel, Performer, move_poses
from kyc_tools.operator.server import is_ready

pytestmark = pytest.mark.integration

CLIENTS = 8


# -- without a server ------------------------------------------------------------------
def test_each_moves_segment_is_what_a_performer_renders_and_shared_frames_are_encoded_once(
        monkeypatch):
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, (96, 80, 3), dtype=np.uint8)
    head = HeadModel(image, [[30, 40], [50, 40], [40, 52], [32, 64], [48, 64]])
    encodings = []
    encode = bench_liveness.encode
    monkeypatch.setattr(bench_liveness, "encode",
                        lambda *a, **k: encodings.append(1) or encode(*a, **k))
    segments, filler, encoded = render_segments(head, tuple(MOVES))
    for move in (None, *MOVES):
        assert list(segments[move]) == Performer(head)(move), move
    # 8 frames facing the camera (one per JPEG variant) + 5 turned per move, of 43
    assert encoded == len(encodings) == FILLER_FRAMES + 5 * len(MOVES)
    assert len({f for frames in segments.values() for f in frames} | set(filler)) == encoded
    assert len(set(filler)) == FILLER_FRAMES and segments[None] == filler[:3]
    assert all(frames[-3:] == filler[5:8] for move, frames in segments.items() if move)


# A library of labelled bytes: the client's choices read plainly in the requests.
SEGMENT = len(move_poses("left"))
HOLD_AT = len(RAMP) + HOLD - 1  # the last frame held: a (fake) server counts the move


def facing(k: int) -> bytes:
    return f"facing-{k}".encode()


def fake_library() -> MoveLibrary:
    segments: dict = {None: tuple(facing(k) for k in range(3))}
    for move in MOVES:
        turned = [f"{move}-{k}".encode() for k in range(SEGMENT - 3)]
        segments[move] = (*turned, *(facing(k) for k in range(SEGMENT - 3, SEGMENT)))
    return MoveLibrary([PersonMoves("synthetic", segments,
                                    tuple(facing(k) for k in range(FILLER_FRAMES)))])


class FakeResult:
    def __init__(self, status: dict, is_live: bool = False) -> None:
        self.outputs = {"STATUS": np.array([[json.dumps(status).encode()]], dtype=np.object_),
                        "IS_LIVE": np.array([[is_live]])}

    def as_numpy(self, name: str):
        return self.outputs[name]


class FakeServer:
    """Records every request. START tells the first move of ``challenge`` (``upfront``:
    all of them, as the previous protocol did); a move is counted ``count_after``
    frames after its last held frame (None: never), the next one told with it; END is
    live when every move was counted."""

    def __init__(self, challenge=("left", "up", "right"), min_duration_s: float = 0.0,
                 max_frames: int = 600, count_after: int | None = 0,
                 upfront: bool = False) -> None:
        self.challenge, self.count_after, self.upfront = tuple(challenge), count_after, upfront
        self.limits = {"min_duration_s": min_duration_s, "max_frames": max_frames}
        self.requests: list[tuple[str, bytes, bool, bool]] = []
        self.done, self.due = 0, None

    async def infer(self, model, inputs, *, sequence_id, sequence_start, sequence_end,
                    client_timeout, headers=None):
        assert model == MODEL and len(inputs) == 1
        await asyncio.sleep(0.001)  # a (very fast) server
        self.requests.append((sequence_id, inputs[0], sequence_start, sequence_end))
        if sequence_start:
            self.done, self.due = 0, None
            told = ({"moves": list(self.challenge)} if self.upfront
                    else {"length": len(self.challenge), "next": self.challenge[0]})
            return FakeResult({"state": "started", "challenge": {**told, **self.limits}})
        self._see(inputs[0])
        if sequence_end:
            return FakeResult({"state": "done"}, self.done == len(self.challenge))
        nxt = self.challenge[self.done] if self.done < len(self.challenge) else None
        return FakeResult({"state": "in_progress", "progress": {
            "moves_done": self.done, "moves": len(self.challenge), "next": nxt}})

    def _see(self, frame: bytes) -> None:
        if self.done < len(self.challenge) and self.count_after is not None:
            if frame == f"{self.challenge[self.done]}-{HOLD_AT}".encode():
                self.due = len(self.requests) + self.count_after
            if self.due is not None and len(self.requests) >= self.due:
                self.done, self.due = self.done + 1, None

    async def close(self) -> None:
        pass


@pytest.fixture
def raw_frames(monkeypatch):
    """Requests to a FakeServer carry the frame's bytes instead of an InferInput."""
    monkeypatch.setattr(bench_liveness, "frame_input", lambda frame: frame)


def drive(client: LivenessBenchClient, server: FakeServer, sessions: int) -> dict:
    client._client = server  # the fake stands in for the aio client
    tallies: dict = {}

    async def run():
        while tallies.get("sessions", 0) < sessions:
            before = len(server.requests)
            for key, value in (await client.next()).items():
                tallies[key] = tallies.get(key, 0) + value
            assert len(server.requests) == before + 1  # one request per call

    asyncio.run(run())
    return tallies


def played(library: MoveLibrary, moves) -> list[bytes]:
    """The frames facing the camera first, then each move's segment."""
    frames = list(library.segment(0, None))
    for move in moves:
        frames += library.segment(0, move)
    return frames


def frames_of(session) -> list[bytes]:
    return [frame for _, frame, _, _ in session[1:]]


def test_a_session_is_start_a_lead_in_then_each_move_as_told_then_end_facing_the_camera(
        raw_frames):
    library, server = fake_library(), FakeServer(("left", "up", "right"))
    tallies = drive(LivenessBenchClient("unused", library, 3), server, sessions=2)
    leads = [lead_in(3, 1), lead_in(3, 2)]
    assert leads[0] != leads[1]  # sessions of one client start their moves at other frames
    per_session = 1 + 3 + 3 * SEGMENT + 1
    assert tallies == {"frames": 2 * per_session + sum(leads), "sessions": 2,
                       "sessions_live": 2}
    first = server.requests[:per_session + leads[0]]
    second = server.requests[per_session + leads[0]:]
    filler = library.filler(0)
    for session, lead in zip((first, second), leads, strict=True):
        assert [(s, e) for _, _, s, e in session] == [(True, False)] + [(False, False)] * (
            len(session) - 2) + [(False, True)]
        frames = frames_of(session)
        assert session[0][1] == b"" and all(f in filler for f in frames[:lead])
        assert frames[lead:-1] == played(library, ("left", "up", "right"))
        assert frames[-1] in filler
        assert len({sid for sid, _, _, _ in session}) == 1
    assert first[0][0] != second[0][0] and "-3-" in first[0][0]


def test_the_next_move_is_played_only_once_the_server_counted_the_one_before(raw_frames):
    library = fake_library()
    server = FakeServer(("right", "down", "left"), count_after=SEGMENT)  # a slow count
    assert drive(LivenessBenchClient("unused", library, 0), server, sessions=1)[
        "sessions_live"] == 1
    frames, lead = frames_of(server.requests), lead_in(0, 1)
    opening = lead + 3
    assert frames[opening:opening + SEGMENT] == list(library.segment(0, "right"))
    # counted SEGMENT requests after the held frame: the client waits facing the camera
    wait = SEGMENT - (SEGMENT - HOLD_AT - 1)
    after = opening + SEGMENT
    assert all(f in library.filler(0) for f in frames[after:after + wait])
    assert frames[after + wait:after + wait + SEGMENT] == list(library.segment(0, "down"))


def test_a_move_never_counted_is_given_up_after_thirty_frames_facing_the_camera(raw_frames):
    library, server = fake_library(), FakeServer(("up", "left", "right"), count_after=None)
    tallies = drive(LivenessBenchClient("unused", library, 0), server, sessions=1)
    assert tallies["sessions_live"] == 0
    frames, lead = frames_of(server.requests), lead_in(0, 1)
    assert frames[:-1 - MAX_WAIT_FRAMES] == [*library.filler(0)[:lead],
                                             *played(library, ("up",))]
    assert all(f in library.filler(0) for f in frames[-1 - MAX_WAIT_FRAMES:])
    assert MAX_WAIT_FRAMES == 30 and server.requests[-1][3]


def test_a_server_of_the_previous_protocol_gets_every_move_it_listed_back_to_back(raw_frames):
    library = fake_library()
    server = FakeServer(("left", "right", "left"), upfront=True, count_after=None)
    tallies = drive(LivenessBenchClient("unused", library, 5), server, sessions=1)
    frames, lead = frames_of(server.requests), lead_in(5, 1)
    assert tallies["frames"] == 1 + lead + 3 + 3 * SEGMENT + 1  # no wait for any count
    assert frames[lead:-1] == played(library, ("left", "right", "left"))


def test_clients_started_together_begin_their_moves_at_different_frames():
    assert len({lead_in(client, 1) for client in range(8)}) == 8
    assert all(0 <= lead_in(c, s) < LEAD_IN_MAX for c in range(16) for s in range(1, 9))


def test_a_session_too_young_to_be_live_is_padded_with_frames_facing_the_camera_up_to_max(
        raw_frames):
    library = fake_library()
    server = FakeServer(min_duration_s=0.3)
    started = time.monotonic()
    drive(LivenessBenchClient("unused", library, 0), server, sessions=1)
    lead, moves = lead_in(0, 1), played(library, server.challenge)
    assert time.monotonic() - started >= 0.3
    assert 1 + lead + len(moves) + 1 < len(server.requests) < 1 + 600
    frames = frames_of(server.requests)
    assert frames[lead:lead + len(moves)] == moves
    assert all(f in library.filler(0) for f in frames[:lead] + frames[lead + len(moves):])
    capped = FakeServer(min_duration_s=100.0, max_frames=30)
    drive(LivenessBenchClient("unused", library, 0), capped, sessions=1)
    assert len(capped.requests) == 1 + 30 and capped.requests[-1][3]


def test_a_move_the_library_lacks_raises_and_the_next_call_ends_the_session(raw_frames):
    library, server = fake_library(), FakeServer(("nod", "left", "right"))
    client = LivenessBenchClient("unused", library, 0)
    client._client = server

    async def run():
        with pytest.raises(LivenessBenchError, match="nod"):
            await client.next()
        return await client.next()

    assert asyncio.run(run()) == {"frames": 1, "sessions": 1, "sessions_live": 0}
    assert [(s, e) for _, _, s, e in server.requests] == [(True, False), (False, True)]


# -- against the server ----------------------------------------------------------------
@pytest.fixture(scope="module")
def library(server) -> MoveLibrary:
    return MoveLibrary.build(server.options.grpc_url, persons=len(ROLES))


def inference_count(server) -> int:
    with grpcclient.InferenceServerClient(server.options.grpc_url) as client:
        stats = client.get_inference_statistics(MODEL, as_json=True)
    return int(stats["model_stats"][0].get("inference_count", 0))


def test_the_library_renders_every_move_of_every_role_once_per_distinct_frame(library):
    assert [p.role for p in library.persons] == list(ROLES)
    assert library.encoded_frames == len(ROLES) * (FILLER_FRAMES + 5 * len(MOVES))
    for person in library.persons:
        assert set(person.segments) == {None, *MOVES}
        assert all(len(f) == SEGMENT for m, f in person.segments.items() if m)


def test_eight_concurrent_clients_end_live_sessions_of_every_role_one_request_per_call(
        server, library):
    url = server.options.grpc_url
    before = inference_count(server)

    async def one(index: int) -> tuple[dict, list[float], set[str]]:
        client = LivenessBenchClient(url, library, index)
        tallies: dict = {}
        latencies: list[float] = []
        ids: set[str] = set()
        try:
            while tallies.get("sessions", 0) < 1:
                started = time.perf_counter()
                tally = await client.next()
                latencies.append(time.perf_counter() - started)
                ids.add(client.session_id or "ended")
                for key, value in tally.items():
                    tallies[key] = tallies.get(key, 0) + value
        finally:
            await client.close()
        return tallies, latencies, ids - {"ended"}

    async def run():
        return await asyncio.gather(*(one(i) for i in range(CLIENTS)))

    results = asyncio.run(run())
    ids = set()
    for tallies, latencies, own in results:
        assert tallies["sessions"] == 1, tallies
        assert tallies["frames"] == len(latencies) >= 1 + 3 + 3 * SEGMENT + 1
        assert all(t > 0 for t in latencies)
        ids |= own
    assert len(ids) == CLIENTS  # one id per session, none shared
    # client k plays person k (mod the roles): every role once at least; the 3-D head
    # passes the challenge and the relief check (seen: 144 sessions of 144)
    assert len(ROLES) <= CLIENTS
    assert sum(t["sessions_live"] for t, _, _ in results) >= CLIENTS - 1
    sent = sum(t["frames"] for t, _, _ in results)
    # The Python backend reports a batch's statistics at the end of its execute, after
    # sending the responses (python_backend's PbMetricReporter): on a busy machine the
    # last ones land a moment after the client has its answer (seen: 203 of 204)
    deadline = time.monotonic() + 10
    while inference_count(server) - before < sent and time.monotonic() < deadline:
        time.sleep(0.1)
    assert inference_count(server) - before == sent  # one request per next(), no others
    assert is_ready(server.options.http_url)


def test_closing_a_client_mid_session_ends_its_session_on_the_server(server, library):
    async def run() -> str:
        client = LivenessBenchClient(server.options.grpc_url, library, 100)
        for _ in range(4):  # START and three frames
            assert await client.next() == {"frames": 1}
        sid = client.session_id
        await client.close()
        assert client.session_id is None
        return sid

    sid = asyncio.run(run())
    with grpcclient.InferenceServerClient(server.options.grpc_url) as client:
        frame = grpcclient.InferInput("FRAME", [1, 1], "BYTES")
        frame.set_data_from_numpy(np.array([[library.filler(0)[0]]], dtype=np.object_))
        with pytest.raises(InferenceServerException, match="START"):
            client.infer(MODEL, [frame], sequence_id=sid)
    assert is_ready(server.options.http_url)
