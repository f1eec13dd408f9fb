"""The liveness load of the benchmark: films for every challenge, one request per call.

The films are NOT video of a live person: they are rendered from real test photos
by the documented cylinder warp of kyc.liveness.synthetic.
"""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from kyc.bench import liveness as bench_liveness
from kyc.bench.liveness import (
    LEAD_IN_MAX,
    MODEL,
    FilmLibrary,
    LivenessBenchClient,
    PersonFilms,
    lead_in,
    possible_challenges,
    render_films,
)
from kyc.liveness.synthetic import turn_sequence
from kyc.runtime.server import is_ready

pytestmark = pytest.mark.integration

CLIENTS = 8


# -- without a server ------------------------------------------------------------------
def test_the_shipped_moves_give_six_challenges_none_the_same_move_all_along():
    challenges = possible_challenges(("left", "right"), 3)
    assert len(challenges) == 6 and len(set(challenges)) == 6
    assert ("left",) * 3 not in challenges and ("right",) * 3 not in challenges


def test_each_film_is_what_turn_sequence_renders_and_shared_frames_are_encoded_once():
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, (96, 80, 3), dtype=np.uint8)
    box = (20.0, 25.0, 60.0, 75.0)
    challenges = possible_challenges(("left", "right"), 3)
    films, filler, encoded = render_films(image, box, challenges)
    for challenge in challenges:
        assert list(films[challenge]) == turn_sequence(image, box, challenge)
    assert encoded == 30  # 12 frames facing the camera + 9 turned each way, of 126
    assert len(filler) == 12 and all(f in films[challenges[0]] for f in filler)


class FakeResult:
    def __init__(self, status: dict, is_live: bool = False) -> None:
        self.outputs = {"STATUS": np.array([[json.dumps(status).encode()]], dtype=np.object_),
                        "IS_LIVE": np.array([[is_live]])}

    def as_numpy(self, name: str):
        return self.outputs[name]


class FakeServer:
    """Records every request; START answers a fixed challenge and limits."""

    def __init__(self, min_duration_s: float, max_frames: int) -> None:
        self.limits = {"min_duration_s": min_duration_s, "max_frames": max_frames}
        self.requests: list[tuple[str, bytes, bool, bool]] = []

    async def infer(self, model, inputs, *, sequence_id, sequence_start, sequence_end,
                    client_timeout):
        assert model == MODEL and len(inputs) == 1
        await asyncio.sleep(0.001)  # a (very fast) server
        self.requests.append((sequence_id, inputs[0], sequence_start, sequence_end))
        if sequence_start:
            return FakeResult({"state": "started", "challenge": {
                "moves": ["left", "right", "left"], **self.limits}})
        return FakeResult({"state": "done" if sequence_end else "in_progress"}, sequence_end)

    async def close(self) -> None:
        pass


def fake_library() -> FilmLibrary:
    image = np.random.default_rng(1).integers(0, 255, (64, 64, 3), dtype=np.uint8)
    challenges = possible_challenges(("left", "right"), 3)
    films, filler, encoded = render_films(image, (16.0, 16.0, 48.0, 48.0), challenges)
    return FilmLibrary([PersonFilms("synthetic", films, filler)], challenges, 0.0, encoded)


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


def test_a_session_is_start_then_a_lead_in_then_the_film_with_end_on_its_last_frame(
        raw_frames):
    library, server = fake_library(), FakeServer(min_duration_s=0.0, max_frames=600)
    tallies = drive(LivenessBenchClient("unused", library, 3), server, sessions=2)
    leads = [lead_in(3, 1), lead_in(3, 2)]
    assert leads[0] != leads[1]  # sessions of one client start their moves at other frames
    assert tallies == {"frames": 44 + sum(leads), "sessions": 2, "sessions_live": 2}
    film, filler = library.film(0, ("left", "right", "left")), library.filler(0)
    first, second = server.requests[:22 + leads[0]], server.requests[22 + leads[0]:]
    for session, lead in zip((first, second), leads, strict=True):
        assert [(s, e) for _, _, s, e in session] == [(True, False)] + [(False, False)] * (
            20 + lead) + [(False, True)]
        frames = [frame for _, frame, _, _ in session[1:]]
        assert session[0][1] == b"" and all(f in filler for f in frames[:lead])
        assert frames[lead:] == list(film)
        assert len({sid for sid, _, _, _ in session}) == 1
    assert first[0][0] != second[0][0] and "-3-" in first[0][0]


def test_clients_started_together_begin_their_moves_at_different_frames():
    assert len({lead_in(client, 1) for client in range(8)}) == 8
    assert all(0 <= lead_in(c, s) < LEAD_IN_MAX for c in range(16) for s in range(1, 9))


def test_a_session_too_young_to_be_live_is_padded_with_frames_facing_the_camera_up_to_max(
        raw_frames):
    library = fake_library()
    server = FakeServer(min_duration_s=0.3, max_frames=600)
    started = time.monotonic()
    drive(LivenessBenchClient("unused", library, 0), server, sessions=1)
    lead = lead_in(0, 1)
    assert time.monotonic() - started >= 0.3 and 22 + lead < len(server.requests) < 1 + 600
    film, filler = library.film(0, ("left", "right", "left")), library.filler(0)
    frames = [frame for _, frame, _, _ in server.requests[1:]]
    assert frames[lead:lead + 20] == list(film[:20]) and frames[-1] == film[-1]
    assert all(f in filler for f in frames[:lead] + frames[lead + 20:-1])
    capped = FakeServer(min_duration_s=100.0, max_frames=30)
    drive(LivenessBenchClient("unused", library, 0), capped, sessions=1)
    assert len(capped.requests) == 1 + 30 and capped.requests[-1][3]


# -- against the server ----------------------------------------------------------------
@pytest.fixture(scope="module")
def films(server) -> FilmLibrary:
    return FilmLibrary.build(server.options.grpc_url, persons=2)


def inference_count(server) -> int:
    with grpcclient.InferenceServerClient(server.options.grpc_url) as client:
        stats = client.get_inference_statistics(MODEL, as_json=True)
    return int(stats["model_stats"][0].get("inference_count", 0))


def test_eight_concurrent_clients_each_finish_a_live_session_one_request_per_call(
        server, films):
    url = server.options.grpc_url
    before = inference_count(server)

    async def one(index: int) -> tuple[dict, list[float], set[str]]:
        client = LivenessBenchClient(url, films, index)
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
        assert tallies["sessions"] == 1 and tallies["sessions_live"] == 1, tallies
        assert tallies["frames"] == len(latencies) >= 1 + 21
        assert all(t > 0 for t in latencies)
        ids |= own
    assert len(ids) == CLIENTS  # one id per session, none shared
    sent = sum(t["frames"] for t, _, _ in results)
    # The Python backend reports a batch's statistics at the end of its execute, after
    # sending the responses (python_backend's PbMetricReporter): on a busy machine the
    # last ones land a moment after the client has its answer (seen: 203 of 204)
    deadline = time.monotonic() + 10
    while inference_count(server) - before < sent and time.monotonic() < deadline:
        time.sleep(0.1)
    assert inference_count(server) - before == sent  # one request per next(), no others
    assert is_ready(server.options.http_url)


def test_closing_a_client_mid_session_ends_its_session_on_the_server(server, films):
    async def run() -> str:
        client = LivenessBenchClient(server.options.grpc_url, films, 100)
        for _ in range(4):  # START and three frames
            assert await client.next() == {"frames": 1}
        sid = client.session_id
        await client.close()
        assert client.session_id is None
        return sid

    sid = asyncio.run(run())
    with grpcclient.InferenceServerClient(server.options.grpc_url) as client:
        frame = grpcclient.InferInput("FRAME", [1, 1], "BYTES")
        frame.set_data_from_numpy(np.array([[films.filler(0)[0]]], dtype=np.object_))
        with pytest.raises(InferenceServerException, match="START"):
            client.infer(MODEL, [frame], sequence_id=sid)
    assert is_ready(server.options.http_url)
