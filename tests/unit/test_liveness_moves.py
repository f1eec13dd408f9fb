"""Liveness moves as declarations: a move is a direction on a named measure of the frame
(kyc.liveness.challenge.MEASURES, MOVES). Moves and measures declared here, in the
test, are checked by the session logic as it ships, and a head-pose move is rendered
from its declaration (no server, no mesh)."""

from __future__ import annotations

import numpy as np
import pytest

from kyc.face.landmarks import calibrated
from kyc.liveness import challenge
from kyc.liveness.challenge import MEASURES, MOVES, PITCH, YAW, Measure, Move, events, reading
from kyc.liveness.session import Frame, LivenessSettings, Session, judge
from kyc_tools.dev.synthetic.liveness import RENDER_DEG, challenge_poses, move_pose

THRESHOLD = 0.363
# A measure the step does not read today: a mouth opening, carried in Frame.readings.
MOUTH = Measure("mouth", "the mouth opened, in the unit of the amplitude",
                lambda frame: frame.readings.get("mouth"))
OPEN_MOUTH = Move("open_mouth", MOUTH, +1, "open your mouth", "a little wider")


def solid(_session) -> float:
    return 0.5  # the relief a real head's turns show (the check on pixels: test_relief.py)


def unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=128).astype(np.float32)
    return v / np.linalg.norm(v)


@pytest.fixture
def mouth(monkeypatch):
    """The mouth measure and its move, declared for this test only."""
    monkeypatch.setitem(MEASURES, MOUTH.name, MOUTH)
    monkeypatch.setitem(MOVES, OPEN_MOUTH.name, OPEN_MOUTH)
    return LivenessSettings(moves="left,right,open_mouth")


def film(*segments: tuple[float, float, int]) -> list[tuple[float, float]]:
    """(yaw, mouth) for each frame: each (yaw, mouth, frames) held so many frames."""
    return [(yaw, opened) for yaw, opened, count in segments for _ in range(count)]


def session_of(frames: list[tuple[float, float]], challenge_moves: tuple[str, ...],
               settings: LivenessSettings) -> tuple[Session, list]:
    session = Session(challenge_moves, started=0.0, last_seen=0.0)
    told = []
    for k, (yaw, opened) in enumerate(frames):
        frame = Frame(True, 1, (yaw, 0.0, 0.0), 500.0, readings={"mouth": opened})
        embedded = session.wants_embedding(frame, frame.sharpness, settings)
        session.add(Frame(True, 1, frame.pose, 500.0, unit(1) if embedded else None,
                          readings=frame.readings), 5.0 * k / len(frames), settings)
        progress = session.progress(settings)
        told.append((progress["next"], progress["guidance"]))
    return session, told


LEFT_MOUTH_RIGHT = film((0, 0, 3), (25, 0, 3), (0, 0, 3), (0, 8, 1), (0, 20, 3), (0, 0, 3),
                        (-25, 0, 3), (0, 0, 3))


def test_a_move_on_a_measure_declared_in_a_test_is_checked_by_the_session_logic(mouth):
    session, told = session_of(LEFT_MOUTH_RIGHT, ("left", "open_mouth", "right"), mouth)
    assert session.events(mouth) == ["left", "open_mouth", "right"]
    verdict = judge(session, mouth, 5.0, THRESHOLD, solid)
    assert verdict.is_live and verdict.reasons == [] and verdict.figures["moves_done"] == 3
    # told in its own words, through the same guidance as a head move
    assert told[8] == ("open_mouth", OPEN_MOUTH.instruction)
    assert told[9] == ("open_mouth", OPEN_MOUTH.more)  # on its way, not there yet
    assert told[10] == ("open_mouth", challenge.GUIDANCE["hold"])


def test_a_declared_move_made_out_of_order_fails_the_challenge(mouth):
    session, _ = session_of(LEFT_MOUTH_RIGHT, ("open_mouth", "left", "right"), mouth)
    verdict = judge(session, mouth, 5.0, THRESHOLD, solid)
    assert not verdict.is_live and verdict.reasons == ["challenge_not_completed"]


def test_a_frame_without_a_reading_of_a_declared_measure_is_neither_a_move_nor_the_centre(
        mouth):
    assert reading(Frame(True, 1, (1.0, 2.0, 0.0), readings={"mouth": 3.0})).tolist() == [
        *calibrated(1.0, 2.0), 3.0]
    assert reading(Frame(True, 1, (1.0, 2.0, 0.0))) is None  # no mouth read
    assert reading(Frame(True, 1, None, readings={"mouth": 3.0})) is None  # no pose
    offsets = [np.array([0.0, 0.0, opened]) for opened in (20.0, 20.0, 0.0, 0.0)]
    assert events([offsets[0], None, *offsets[1:]], ("open_mouth",), 12, 6, 2) == ["open_mouth"]


def test_a_move_declared_on_the_head_pose_is_checked_without_a_new_measure(monkeypatch):
    look_up = Move("look_up", PITCH, +1, "look up at the ceiling", "a little higher")
    monkeypatch.setitem(MOVES, look_up.name, look_up)
    offsets = [np.array([0.0, pitch]) for pitch in (0, 0, 20, 20, 20, 0, 0)]
    assert events(offsets, ("left", "look_up"), 12, 6, 2) == ["look_up"]
    assert challenge.parse_moves("left,look_up") == ("left", "look_up")


def test_every_declared_head_pose_move_renders_as_its_direction_on_its_measure(monkeypatch):
    look_up = Move("look_up", PITCH, +1, "look up at the ceiling", "a little higher")
    monkeypatch.setitem(MOVES, look_up.name, look_up)
    for move in MOVES.values():
        yaw, pitch = move_pose(move.name)
        on, off = (yaw, pitch) if move.measure is YAW else (pitch, yaw)
        assert off == 0.0 and on == move.sign * RENDER_DEG[(move.measure.name, move.sign)]
    assert move_pose("look_up") == move_pose("up") == (0.0, 35.0)
    assert move_pose(None) == (0.0, 0.0)
    assert len(challenge_poses(["look_up", "left"])) == len(challenge_poses(["up", "right"]))


def test_a_move_on_a_measure_the_head_renderer_cannot_show_is_refused_by_name(mouth):
    with pytest.raises(ValueError, match="'open_mouth' is made on 'mouth'"):
        move_pose("open_mouth")
