"""The liveness aggregator on pose trajectories, the session store and the token (no server)."""

from __future__ import annotations

import base64
import itertools
from dataclasses import replace

import numpy as np
import pytest

from kyc.keys import TokenKeyError, create_key_file, key_id, load_key
from kyc.liveness.challenge import (
    GUIDANCE,
    draw_challenge,
    events,
    parse_moves,
    plausible,
    possible_challenges,
    progress,
    yaw_moves,
)
from kyc.liveness.challenge import (
    MOVES as MOVE_SPECS,
)
from kyc.liveness.session import Frame, LivenessSettings, Session, judge
from kyc.liveness.store import SessionLimitError, SessionStore, StartLimiter
from kyc.liveness.token import MAX_TOKEN_BYTES, LivenessClaims, TokenError, TokenSealer

SETTINGS = LivenessSettings()
MOVES = ("left", "right")
THRESHOLD = 0.363


def SOLID(session) -> float:  # noqa: N802 - a relief ratio, as a real head shows
    """The relief these pose-only sessions would show if their turns were a real head's
    (the relief check on pixels is tests/unit/test_relief.py's)."""
    return 0.5


def yaw_track(*segments: tuple[float, int]) -> list[np.ndarray]:
    """Offsets (yaw, pitch=0) holding each yaw for its number of frames."""
    return [np.array([yaw, 0.0]) for yaw, count in segments for _ in range(count)]


def found(track):
    return events(track, MOVES, amplitude=12, centre=6, min_hold=2)


# -- challenge ---------------------------------------------------------------------------
def test_turns_separated_by_the_centre_are_events_in_order():
    assert found(yaw_track((0, 3), (20, 3), (0, 3), (-20, 3), (0, 3), (20, 3))) == [
        "left", "right", "left"]


def test_holding_a_turn_or_flickering_across_the_centre_band_is_one_event():
    # 9 degrees is between centre and amplitude: still turned, not a new turn
    assert found(yaw_track((0, 3), (20, 3), (9, 2), (20, 3), (0, 3))) == ["left"]
    # a single frame back at the centre does not count (min_hold 2)
    assert found(yaw_track((0, 3), (20, 3), (0, 1), (20, 3))) == ["left"]
    # but a held return does: two lefts
    assert found(yaw_track((0, 3), (20, 3), (0, 2), (20, 3))) == ["left", "left"]


def test_a_turn_must_pass_the_amplitude_for_enough_frames():
    assert found(yaw_track((0, 3), (11, 5), (0, 3))) == []
    assert found(yaw_track((0, 3), (20, 1), (0, 3))) == []


def test_frames_without_a_face_neither_break_nor_make_a_hold():
    track = [*yaw_track((0, 3), (20, 1)), None, *yaw_track((20, 1), (0, 3))]
    assert found(track) == ["left"]


def test_progress_counts_moves_in_order_and_stops_at_the_first_wrong_one():
    assert progress(["left", "right"], ("left", "right", "left")) == 2
    assert progress(["right", "left", "left"], ("left", "right", "left")) == 0  # wrong way
    assert progress(["left", "right", "right"], ("left", "left", "right")) == 1
    assert progress(["left", "up", "down", "right"], ("left", "right", "left")) == 1


def test_natural_movement_on_the_way_is_forgiven_once_and_anything_after_the_last_move():
    lrl = ("left", "right", "left")
    assert progress(["left", "up", "right", "left"], lrl, 1) == 3  # a nod between
    assert progress(["left", "left", "right", "left"], lrl, 1) == 3  # a move made again
    assert progress(["left", "right", "left", "up", "right", "down"], lrl) == 3  # a lean after
    assert progress(["left", "up", "left", "right", "left"], lrl, 1) == 1  # two on the way
    assert progress(["left", "right", "right", "up", "left"], lrl, 1) == 2
    assert progress(["left", "up", "left", "right", "left"], lrl, 2) == 3
    # a glance aside while a tilt is asked
    assert progress(["left", "right", "up", "right"], ("left", "up", "right"), 1) == 3
    assert progress(["left", "up"], lrl) == 1  # none forgiven by default


@pytest.mark.parametrize("forgiven, passed", [(0, 1), (1, 3), (2, 5)])
def test_what_a_fixed_recording_passes_grows_with_the_movement_forgiven(forgiven, passed):
    from kyc_tools.dev.eval.liveness import fixed_recording

    best = fixed_recording(("left", "right", "up", "down"), 3, 2, forgiven)
    assert best["challenges"] == 30 and best["passed_at_best"] == passed
    assert sum(progress(best["recording"], c, forgiven) == 3
               for c in possible_challenges(("left", "right", "up", "down"), 3, 2)) == passed


def test_challenges_use_the_configured_moves_and_never_one_move_all_along():
    assert parse_moves(" left, right ") == ("left", "right")
    with pytest.raises(ValueError, match="sideways"):
        parse_moves("left,sideways")
    picks = itertools.cycle(["left", "left", "left", "right", "left", "right"])
    assert draw_challenge(MOVES, 3, lambda options: next(picks)) == ("right", "left", "right")
    assert draw_challenge(("up",), 2) == ("up", "up")
    drawn = {draw_challenge(MOVES, 3) for _ in range(200)}
    assert len(drawn) == 6 and ("left",) * 3 not in drawn


def test_challenges_turn_the_head_at_least_min_turns_times_and_are_thirty_to_shop_from():
    every = possible_challenges(("left", "right", "up", "down"), 3, min_turns=2)
    assert len(every) == 30 and all(yaw_moves(c) >= 2 for c in every)
    drawn = {draw_challenge(("left", "right", "up", "down"), 3, min_turns=2)
             for _ in range(2000)}
    assert drawn == set(every)
    # a challenge cannot turn more than it has moves, nor without a turning move
    assert yaw_moves(draw_challenge(("left", "right"), 1, min_turns=2)) == 1
    assert draw_challenge(("up", "down"), 3, min_turns=2) in possible_challenges(
        ("up", "down"), 3, min_turns=2)


def test_a_tilt_that_also_turns_a_little_is_the_move_that_went_furthest():
    both = events([np.array([13.0, 20.0])] * 3, ("left", "up"), 12, 6, 2)
    assert both == ["up"]
    assert events([np.array([-20.0, -13.0])] * 3, ("right", "down"), 12, 6, 2) == ["right"]


def test_poses_no_head_makes_are_not_poses():
    assert plausible(30.0, -20.0) and not plausible(173.0, 0.0)
    assert not plausible(-149.0, 5.0) and not plausible(0.0, 70.0)
    assert not plausible(float("nan"), 0.0)


# -- sessions ------------------------------------------------------------------------------
def unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=128).astype(np.float32)
    return v / np.linalg.norm(v)


def near(base: np.ndarray, seed: int) -> np.ndarray:
    v = base + 0.3 * unit(seed)
    return (v / np.linalg.norm(v)).astype(np.float32)


def session_of(yaws: list[float], challenge=("left", "right", "left"), person=None,
               duration: float = 5.0, faces: int = 1, sharpness: float = 500.0):
    person = unit(1) if person is None else person
    session = Session(tuple(challenge), started=0.0, last_seen=0.0)
    for k, yaw in enumerate(yaws):
        embedding = person[k] if isinstance(person, list) else near(person, 100 + k)
        session.add(Frame(True, faces, (yaw, 0.0, 0.0), sharpness, embedding),
                    duration * k / max(len(yaws), 1))
    return session, duration


LIVE = [0.0] * 3 + [25.0] * 3 + [0.0] * 3 + [-25.0] * 3 + [0.0] * 3 + [25.0] * 3 + [0.0] * 3


def test_a_session_that_does_the_challenge_is_live_with_a_high_score():
    session, ended = session_of(LIVE)
    verdict = judge(session, SETTINGS, ended, THRESHOLD, SOLID)
    assert verdict.is_live and verdict.reasons == [] and verdict.score > 0.95
    assert verdict.checks["passive_pad"] == "not_configured"
    assert verdict.best_embedding is not None and verdict.figures["moves_done"] == 3


@pytest.mark.parametrize(("change", "reason"), [
    ({"yaws": [0.0] * 21}, "challenge_not_completed"),
    ({"challenge": ("right", "left", "right")}, "challenge_not_completed"),
    ({"duration": 0.5}, "duration_out_of_bounds"),
    ({"duration": 90.0}, "duration_out_of_bounds"),
    ({"faces": 2}, "multiple_or_no_faces"),
    ({"sharpness": 10.0}, "too_few_sharp_frames"),
])
def test_each_failed_check_says_why(change, reason):
    kwargs = {"yaws": LIVE, **change}
    session, ended = session_of(**kwargs)
    verdict = judge(session, SETTINGS, ended, THRESHOLD, SOLID)
    assert not verdict.is_live and reason in verdict.reasons


def _posed(poses: list[tuple[float, float]], challenge=("left", "right", "left")):
    """A session of (yaw, pitch) fit readings, one frame each."""
    session = Session(tuple(challenge), started=0.0, last_seen=0.0)
    for k, (yaw, pitch) in enumerate(poses):
        session.add(Frame(True, 1, (yaw, pitch, 0.0), 500.0, near(unit(1), 100 + k)),
                    5.0 * k / len(poses))
    return session


def held(*segments: tuple[float, float, int]) -> list[tuple[float, float]]:
    return [(yaw, pitch) for yaw, pitch, count in segments for _ in range(count)]


# left, right, left as a person makes them; then leaning back (read as tilting up)
TURNS = held((0, 0, 3), (15, 0, 3), (0, 0, 3), (-15, 0, 3), (0, 0, 3), (15, 0, 3), (0, 0, 3))
LEAN = held((0, 12, 4), (0, 0, 2))
NOD = held((0, -12, 3), (0, 0, 3))


@pytest.mark.parametrize(("poses", "forgiven", "live"), [
    (TURNS, 0, True),
    (TURNS + LEAN, 0, True),  # after the last move: anything
    (TURNS[:9] + NOD + TURNS[9:], 0, False),  # a nod on the way, none forgiven
    (TURNS[:9] + NOD + TURNS[9:], 2, True),
    (TURNS[:9] + NOD + NOD + NOD + TURNS[9:], 2, False),  # a third
])
def test_a_lean_after_the_moves_or_nods_on_the_way_up_to_forgiven_moves_stay_live(
        poses, forgiven, live):
    """Readings of the mesh fit: 15 is past the 12 degrees of the head asked, once
    calibrated, as 12 is for a tilt (the fit reads about 0.6 of a head's degrees)."""
    settings = replace(SETTINGS, forgiven_moves=forgiven)
    verdict = judge(_posed(poses), settings, 5.0, THRESHOLD, SOLID)
    assert verdict.is_live is live, verdict.reasons
    assert verdict.figures["moves_done"] == (3 if live else 1)


def test_a_relief_that_cannot_be_measured_fails_its_check_and_nothing_else():
    session, ended = session_of(LIVE)

    def broken(_session):
        raise np.linalg.LinAlgError("Singular matrix")

    for relief_of in (broken, lambda _s: float("nan")):
        verdict = judge(session, SETTINGS, ended, THRESHOLD, relief_of)
        assert not verdict.is_live and verdict.reasons == ["face_looks_flat"]


def test_another_face_halfway_is_a_changed_face():
    a, b = unit(1), unit(2)
    people = [near(a, k) for k in range(10)] + [near(b, k) for k in range(10, len(LIVE))]
    session, ended = session_of(LIVE, person=people)
    verdict = judge(session, SETTINGS, ended, THRESHOLD, SOLID)
    assert not verdict.is_live and verdict.reasons == ["face_changed"]


def observed(yaws, sharpness, people, settings=SETTINGS):
    """A session whose frames are embedded as the model embeds them (wants_embedding)."""
    session = Session(("left", "right", "left"), started=0.0, last_seen=0.0)
    for k, (yaw, sharp) in enumerate(zip(yaws, sharpness, strict=True)):
        pose = (yaw, 0.0, 0.0)
        embedding = people[k] if session.wants_embedding(pose, sharp, settings) else None
        session.add(Frame(True, 1, pose, sharp, embedding), 5.0 * k / len(yaws))
    return session


def test_the_baseline_every_turned_frame_and_each_sharper_frontal_frame_are_embedded():
    sharp = [300.0, 100.0, 200.0, 150.0, 400.0, 120.0, 90.0, 90.0, 90.0, 500.0, 80.0]
    yaws = [0.0, 1.0, -1.0, 2.0, 0.0, 25.0, 25.0, 3.0, 0.0, 0.0, 0.0]
    session = observed(yaws, sharp, [unit(1)] * len(yaws))
    embedded = [k for k, f in enumerate(session.frames) if f.embedding is not None]
    # 0-2 the baseline; 3 the first frontal after it; 4 sharper; 5-6 turned; 9 sharper
    assert embedded == [0, 1, 2, 3, 4, 5, 6, 9]
    verdict = judge(session, SETTINGS, 5.0, THRESHOLD, SOLID)
    assert verdict.figures["frames_with_face"] == 11 and verdict.figures["frames_compared"] == 8


def test_the_best_frame_embedded_is_within_a_tenth_of_the_sharpest():
    from kyc.liveness.session import FRONTAL_SHARPER_BY, best_frame

    rng = np.random.default_rng(5)
    for _ in range(200):
        n = int(rng.integers(4, 40))
        yaws = list(rng.choice([0.0, 2.0, -3.0, 9.0, 25.0, -25.0], size=n))
        sharp = list(rng.uniform(10, 600, size=n))
        session = observed(yaws, sharp, [unit(1)] * n)
        every = Session(session.challenge, 0.0, 0.0, [
            Frame(True, 1, f.pose, f.sharpness, unit(1)) for f in session.frames])
        best = best_frame(every.frames, SETTINGS, every.offsets(SETTINGS))
        chosen = best_frame(session.frames, SETTINGS, session.offsets(SETTINGS))
        offsets = every.offsets(SETTINGS)
        assert np.abs(offsets[chosen]).max() <= SETTINGS.centre_deg \
            or np.abs(offsets[best]).max() > SETTINGS.centre_deg  # frontal when one is
        assert session.frames[chosen].sharpness * (1 + FRONTAL_SHARPER_BY) \
            >= every.frames[best].sharpness


def test_moves_made_by_another_person_than_the_frontal_one_are_a_changed_face():
    a, b = unit(1), unit(2)
    people = [near(b if yaw else a, k) for k, yaw in enumerate(LIVE)]
    session = observed(LIVE, [500.0] * len(LIVE), people)
    verdict = judge(session, SETTINGS, 5.0, THRESHOLD, SOLID)
    assert not verdict.is_live and verdict.reasons == ["face_changed"]
    live = observed(LIVE, [500.0] * len(LIVE), [near(a, k) for k in range(len(LIVE))])
    assert judge(live, SETTINGS, 5.0, THRESHOLD, SOLID).is_live


def test_a_configured_passive_pad_model_counts_and_can_fail_the_session():
    from dataclasses import replace

    settings = replace(SETTINGS, antispoof_model="face_antispoof")
    session, ended = session_of(LIVE)
    assert "passive_pad_failed" in judge(session, settings, ended, THRESHOLD, SOLID).reasons
    session.frames = [replace(frame, pad_score=0.9) for frame in session.frames]
    assert judge(session, settings, ended, THRESHOLD, SOLID).is_live


def test_turns_that_show_no_relief_of_a_face_are_not_live():
    session, ended = session_of(LIVE)
    flat = judge(session, SETTINGS, ended, THRESHOLD, lambda _: 0.01)
    assert not flat.is_live and flat.reasons == ["face_looks_flat"]
    unread = judge(session, SETTINGS, ended, THRESHOLD, lambda _: None)  # no turn to read
    assert not unread.is_live and unread.reasons == ["face_looks_flat"]
    from dataclasses import replace

    off = judge(session, replace(SETTINGS, min_relief=0.0), ended, THRESHOLD, lambda _: 0.0)
    assert off.is_live and off.checks["relief"] == "off"


def test_a_frame_without_a_plausible_pose_is_no_move_and_is_counted():
    yaws = LIVE[:5] + [None] * 4 + LIVE[5:]
    session = Session(("left", "right", "left"), 0.0, 0.0)
    for k, yaw in enumerate(yaws):
        pose = None if yaw is None else (yaw, 0.0, 0.0)
        session.add(Frame(True, 1, pose, 500.0, near(unit(1), k), implausible=yaw is None),
                    5.0 * k / len(yaws))
    verdict = judge(session, SETTINGS, 5.0, THRESHOLD, SOLID)
    assert verdict.is_live and verdict.figures["frames_without_plausible_pose"] == 4


def test_each_move_is_told_only_once_the_one_before_it_is_done_in_words_not_angles():
    session = Session(("left", "right", "left"), 0.0, 0.0)
    told = []
    for k, yaw in enumerate([0.0] * 3 + [6.0] + [25.0] * 3 + [0.0] * 3 + [-25.0] * 3):
        session.add(Frame(True, 1, (yaw, 0.0, 0.0), 500.0, unit(1)), k * 0.1, SETTINGS)
        told.append((session.progress(SETTINGS)["next"], session.progress(SETTINGS)["guidance"]))
    assert told[2] == ("left", MOVE_SPECS["left"].instruction)
    assert told[3] == ("left", MOVE_SPECS["left"].more)  # on its way, not there yet
    assert told[4] == ("left", GUIDANCE["hold"])
    assert told[5] == ("right", GUIDANCE["back"])  # left counted: right told, centre first
    assert told[9] == ("right", MOVE_SPECS["right"].instruction)
    assert told[-1] == ("left", GUIDANCE["back"])
    findings = session.frames[-1].findings(SETTINGS)
    assert set(findings) == {"face_found", "faces", "sharp"}  # no yaw, no pitch


def test_a_client_or_customer_may_start_so_many_sessions_in_a_window():
    limiter = StartLimiter(limit=2, window_s=60)
    assert limiter.retry_after_s("client-1", 0.0) == 0
    limiter.count("client-1", 0.0)
    limiter.count("client-1", 10.0)
    assert limiter.retry_after_s("client-1", 20.0) == pytest.approx(40.0)
    assert limiter.retry_after_s("client-2", 20.0) == 0  # others are not held back
    assert limiter.retry_after_s("client-1", 60.5) == 0  # the first START left the window
    assert b"client-1" not in b"".join(limiter._starts)  # only salted digests are kept
    small = StartLimiter(limit=1, window_s=60, max_keys=2)
    for key in ("a", "b", "c"):
        small.count(key, 0.0)
    assert small.retry_after_s("a", 1.0) == 0 and small.retry_after_s("c", 1.0) > 0


# -- store ---------------------------------------------------------------------------------
def test_the_store_evicts_idle_sessions_caps_them_and_a_start_resets():
    store = SessionStore(max_sessions=2, idle_ttl_s=10)
    store.start("a", Session(("left",), 0, 0))
    store.start("b", Session(("left",), 0, 5))
    with pytest.raises(SessionLimitError):
        store.start("c", Session(("left",), 6, 6))
    fresh = Session(("right",), 7, 7)
    store.start("a", fresh)  # a START for a live id replaces it
    assert store.get("a") is fresh and len(store) == 2
    assert store.evict_idle(now=16) == 1 and store.get("b") is None  # b idle since 5
    assert store.end("a") is fresh and len(store) == 0 and store.evicted == 1


# -- token ---------------------------------------------------------------------------------
def claims(expires: float = 2e9) -> LivenessClaims:
    return LivenessClaims("s1", True, 0.97, 1e9, expires, ("left", "right"), unit(3),
                          {"challenge": True}, None, "0123abcd")


def test_a_token_round_trips_and_hides_its_content():
    sealer = TokenSealer(b"k" * 32)
    token = sealer.seal(claims())
    body = token.split(b".")[2]
    assert token.startswith(b"kyc2." + sealer.key_id.encode() + b".")
    sealed = base64.urlsafe_b64decode(body + b"=" * (-len(body) % 4))
    # Words of the claims, long enough not to turn up by chance in random bytes ("s1",
    # two bytes, did: about once in 600 seals).
    for word in (b'"sid"', b'"score"', b'"challenge"', b"left", b"right"):
        assert word not in sealed
    opened = sealer.open(token, now=1.5e9)
    assert opened.session == "s1" and opened.is_live and opened.challenge == ("left", "right")
    np.testing.assert_array_equal(opened.embedding, unit(3))
    assert opened.checks == {"challenge": True} and not opened.passive_pad
    assert opened.token_id == "0123abcd" and opened.application is None
    assert sealer.seal(claims()) != token  # a fresh nonce each time


def test_a_token_says_which_checks_ran_and_whether_passive_pad_was_one():
    from dataclasses import replace

    sealer = TokenSealer(b"k" * 32)
    ran = {"challenge": True, "relief": True, "passive_pad": "not_configured"}
    opened = sealer.open(sealer.seal(replace(claims(), checks=ran)), now=1.5e9)
    assert opened.checks == ran and not opened.passive_pad
    padded = sealer.open(sealer.seal(replace(claims(), checks={**ran, "passive_pad": True})),
                         now=1.5e9)
    assert padded.passive_pad


def test_altered_foreign_expired_or_garbage_tokens_are_refused():
    sealer = TokenSealer(b"k" * 32)
    token = bytearray(sealer.seal(claims()))
    for position in (6, len(token) // 2, len(token) - 2):
        forged = bytearray(token)
        forged[position] = ord("B") if forged[position] != ord("B") else ord("C")
        with pytest.raises(TokenError):
            sealer.open(bytes(forged), now=1.5e9)
    with pytest.raises(TokenError, match="another token key"):
        TokenSealer(b"j" * 32).open(bytes(token), now=1.5e9)
    with pytest.raises(TokenError, match="expired"):
        sealer.open(bytes(token), now=2e9)
    for junk in (b"", b"kyc1.", b"kyc1.!!!", b"nope", "é".encode()):
        with pytest.raises(TokenError):
            sealer.open(junk)


def test_replicas_with_the_same_key_read_each_others_tokens():
    replica_a, replica_b = TokenSealer(b"k" * 32), TokenSealer(b"k" * 32)
    assert replica_a.key_id == replica_b.key_id == key_id(b"k" * 32)
    assert replica_b.open(replica_a.seal(claims()), now=1.5e9).session == "s1"


def test_a_token_from_a_replica_with_another_key_names_both_key_ids():
    ours, theirs = TokenSealer(b"k" * 32), TokenSealer(b"j" * 32)
    assert ours.key_id != theirs.key_id and len(ours.key_id) == 8
    with pytest.raises(TokenError) as refused:
        ours.open(theirs.seal(claims()), now=1.5e9)
    message = str(refused.value)
    assert theirs.key_id in message and ours.key_id in message
    assert "every server must have the same KYC_TOKEN_KEY" in message


def test_a_token_whose_key_id_was_swapped_fails_its_tag():
    ours, theirs = TokenSealer(b"k" * 32), TokenSealer(b"j" * 32)
    swapped = theirs.seal(claims()).replace(theirs.key_id.encode(), ours.key_id.encode(), 1)
    with pytest.raises(TokenError, match="altered or made with another key"):
        ours.open(swapped, now=1.5e9)


def test_tokens_of_the_retired_formats_are_refused_even_with_the_right_key():
    from dataclasses import replace

    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    nonce = b"n" * 12
    sealed = AESGCM(b"k" * 32).encrypt(nonce, claims().to_json(), b"kyc-liveness-token-v1")
    legacy = b"kyc1." + base64.urlsafe_b64encode(nonce + sealed).rstrip(b"=")
    sealer = TokenSealer(b"k" * 32)
    with pytest.raises(TokenError, match="retired format"):
        sealer.open(legacy, now=1.5e9)
    # the current envelope around claims of before token ids, or before the checks
    for old in (replace(claims(), token_id=""), replace(claims(), checks=None)):
        with pytest.raises(TokenError, match="retired format"):
            sealer.open(sealer.seal(old), now=1.5e9)


def test_a_key_id_tells_nothing_of_the_key():
    key = bytes(range(32))
    assert key_id(key) == key_id(key) and key.hex()[:8] not in key_id(key)
    assert len({key_id(bytes([i]) * 32) for i in range(64)}) == 64


def test_a_token_longer_than_the_cap_is_refused_before_it_is_decoded():
    sealer = TokenSealer(b"k" * 32)
    big = LivenessClaims("s" * 64, True, 0.97, 1e9, 2e9, ("left",) * 6, unit(512),
                         {"challenge": True, "relief": True}, "a" * 128, "f" * 32)
    assert len(sealer.seal(big)) < MAX_TOKEN_BYTES / 4  # a 512-d token fits with room
    with pytest.raises(TokenError, match=f"longer than {MAX_TOKEN_BYTES}"):
        sealer.open(b"kyc1." + b"A" * MAX_TOKEN_BYTES)


def test_the_key_comes_from_the_environment_or_a_private_key_file(tmp_path):
    key = base64.b64encode(b"x" * 32).decode()
    assert load_key({"KYC_TOKEN_KEY": key}) == b"x" * 32
    path = create_key_file(tmp_path / "kyc" / "token.key")
    assert path.stat().st_mode & 0o777 == 0o600
    first = load_key({"KYC_TOKEN_KEY_FILE": str(path)})
    assert len(first) == 32 and create_key_file(path) == path  # kept, not replaced
    assert load_key({"KYC_TOKEN_KEY_FILE": str(path)}) == first
    for env in ({}, {"KYC_TOKEN_KEY": "c2hvcnQ="}, {"KYC_TOKEN_KEY_FILE": str(tmp_path / "x")}):
        with pytest.raises(TokenKeyError):
            load_key(env)


# -- the shipped config ----------------------------------------------------------------------
def test_the_shipped_config_sets_every_setting_and_bounds_idle_time_for_humans():
    import dataclasses

    from kyc.settings import from_parameters
    from kyc_testing import SHIPPED_REPOSITORY
    from kyc_tools.repo.config import load_config, model_parameters

    parameters = model_parameters(SHIPPED_REPOSITORY, "liveness_sequence")
    assert set(parameters) == {f.name for f in dataclasses.fields(LivenessSettings)}
    settings = from_parameters(LivenessSettings, parameters)
    config = load_config(SHIPPED_REPOSITORY / "liveness_sequence" / "config.pbtxt")
    idle_s = config.sequence_batching.max_sequence_idle_microseconds / 1e6
    # far above Triton's 1 s default (a person between frames), bounded; the model's
    # own eviction never comes before Triton has dropped the sequence
    assert 10 <= idle_s <= settings.idle_ttl_s <= 300
    assert config.sequence_batching.HasField("oldest")
    assert settings.antispoof_model == ""  # no trained weights are shipped


def test_the_relief_is_read_over_the_larger_turn_on_the_head_poses_side(monkeypatch):
    import kyc.liveness.session as session_module

    divisors = []
    monkeypatch.setattr(session_module, "relief",
                        lambda base, turn, axis, degrees: divisors.append(degrees) or 0.5)
    base = session_module.TurnView(0.0, (2.0, 0.0, 0.0), "view")
    curved = session_module.TurnView(8.0, (10.0, 0.0, 0.0), "view")
    tilted = session_module.TurnView(12.0, (-10.0, 0.0, 0.0), "view")
    unread = session_module.TurnView(9.0, (11.0, 0.0, 0.0), "view")
    five = (20.0, 3.0, float("nan"))  # the five points' turns
    assert [session_module._relief(base, t, f)
            for t, f in zip((curved, tilted, unread), five, strict=True)] == [0.5, 0.5, 0.0]
    assert divisors == [20.0, -12.0]  # the five points' 20; the pose's 12, on its side


def test_every_baseline_view_is_paired_with_every_turned_view(monkeypatch):
    import kyc.liveness.session as session_module

    pairs = []
    monkeypatch.setattr(session_module, "relief",
                        lambda base, turn, axis, degrees: pairs.append((base, turn)) or 0.3)
    monkeypatch.setattr(session_module, "five_yaw", lambda view: view)
    session = Session(("left", "right"), 0.0, 0.0)
    for k, yaw in enumerate([0.0, 0.5, -0.5] + [20.0] * 3 + [0.0] * 2 + [-20.0] * 3):
        session.add(Frame(True, 1, (yaw, 0.0, 0.0), 500.0, unit(1)), k * 0.1, SETTINGS,
                    view=yaw * 1.5)
    assert len(session.base_views) == SETTINGS.baseline_frames
    kept = sum(len(v) for v in session.turn_views.values())
    assert kept == 2 * SETTINGS.relief_views
    assert session.relief_score() == 0.3
    assert len(pairs) == SETTINGS.baseline_frames * kept


def test_the_five_point_yaw_of_a_view_is_the_frames():
    """The canonical square is a similarity of the frame: the yaw its five points read
    is the one the frame's read."""
    from kyc.face.quality import head_pose
    from kyc.liveness.relief import face_view
    from kyc.liveness.session import five_yaw

    five = np.array([[300, 200], [360, 215], [350, 250], [305, 280], [345, 290]], float)
    view = face_view(np.zeros((480, 640, 3), np.uint8), five)
    assert abs(five_yaw(view) - head_pose(five)[0]) < 0.5
