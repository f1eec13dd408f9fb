"""The active challenge: an ordered list of moves, finding them in a trajectory of a
frame's measures, and the words that guide a person through them.

A move is declared once (:data:`MOVES`): a direction on a named measure of the frame
(:data:`MEASURES`) and its words. The measures today are the head pose's yaw and pitch;
a measure is a name and how to read it from a frame (kyc.liveness.session.Frame), so a
new one (a mouth opening, read into ``Frame.readings`` by the step) and moves on it are
declarations here: the session, the zones and the guidance read every move through
its declaration. To add a move: docs/vocabularies.md; docs/liveness-moves.md is
generated from here (``kyc docs moves``).

Poses come from the head pose of the frame's landmarks, in degrees of the head (the
mesh fit calibrated on renders of known angles: kyc.face.landmarks.degrees), in the
frame as the camera sends it (not mirrored): yaw > 0 when the face turns towards the
image's right, which is the person's own LEFT; pitch > 0 when it tilts up. A pose no head makes
(:func:`plausible`: beyond :data:`MAX_YAW_DEG` or :data:`MAX_PITCH_DEG`, or a fit that
did not converge) is no pose at all: it is neither a move nor the centre.

A trajectory (each frame's measures, in :data:`MEASURES` order) is cut into zones with
hysteresis, relative to the session's baseline (the median of its first frames with a
reading of every measure):

- a move's zone is entered when its measure passes ``amplitude`` (degrees, for the
  head pose) in its direction, and left only when it comes back within ``centre``;
- anywhere else is the centre zone;
- a zone counts once it has held ``min_hold`` consecutive frames.

The events are the counted move zones in order, one per visit: ``left, centre,
left`` is two lefts, ``left, left`` one. The challenge passes when its moves are found
in the events in order (:func:`progress`), with room for what people do:

- anything after the last move asked (settling back in the chair, a nod, a glance:
  the moves were shown, and a recording gains nothing from what follows them);
- before it, ``forgiven`` events (the session's ``forgiven_moves``, 2 by default) that
  are not the move asked next, when each is a move on the other measure (a nod or a
  lean while a turn is asked, a glance aside while a tilt is asked) or the move just
  made once more (done again, not sure it counted).

Any other event fails: the wrong direction, one unasked move too many, the moves in
another order. A recording of fixed moves played to the random challenges of
:func:`possible_challenges` (30 by default) passes 3 of them at best with one forgiven,
5 with two, 1 with none (``kyc eval liveness`` reports it for the served setting).

The challenge is told one move at a time (:func:`progress`): the next move only
once the one before it was made, so that a recording cannot be chosen for a
challenge seen in advance. Guidance is in words (:func:`guidance`), never in
measured angles: a person needs "a little more to your left", a turned print
tuned to pass needs the numbers.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kyc.face.landmarks import degrees

CENTRE = "centre"
# A head turns about 80 degrees each way at most, and the five landmarks are read
# reliably to about 60 (kyc.face.quality): a fit beyond (in the mesh fit's own
# reading, which saturates past 30 degrees of the head) is a misfit, not a turn.
MAX_YAW_DEG = 60.0
MAX_PITCH_DEG = 50.0


@dataclass(frozen=True)
class Measure:
    """A figure of a frame that moves are made on, read relative to the session's
    baseline, in the unit of the ``amplitude_deg``/``centre_deg`` settings."""

    name: str
    what: str  # for the docs: what it measures and its sign
    read: Callable[[Any], float | None]  # the frame's value; None: the frame has none


def _head_pose(k: int, name: str) -> Callable[[Any], float | None]:
    """The head pose's yaw (0) or pitch (1), ``name``, in degrees of the head: the mesh
    fit's (``frame.pose``) through its calibration (kyc.face.landmarks.degrees)."""
    def read(frame: Any) -> float | None:
        return None if frame.pose is None else degrees(name, frame.pose[k])
    return read


YAW = Measure("yaw", "the head turned, degrees of the head: > 0 towards the image's right "
                     "(the person's left, the frame not mirrored)", _head_pose(0, "yaw"))
PITCH = Measure("pitch", "the head tilted, degrees of the head: > 0 up",
                _head_pose(1, "pitch"))
# Every measure a frame is read on, in the order of a trajectory's offsets.
MEASURES: dict[str, Measure] = {m.name: m for m in (YAW, PITCH)}


@dataclass(frozen=True)
class Move:
    """A move: past the amplitude on ``measure`` in direction ``sign``, held."""

    name: str
    measure: Measure
    sign: int  # +1 or -1 on that measure
    instruction: str  # what the person is asked
    more: str  # when they are on their way but not there yet

    def along(self, offset: np.ndarray) -> float:
        """How far the offset (from the baseline, :data:`MEASURES` order) goes this way."""
        return self.sign * offset[list(MEASURES).index(self.measure.name)]


MOVES: dict[str, Move] = {m.name: m for m in (
    Move("left", YAW, +1, "turn your head to your left", "a little more to your left"),
    Move("right", YAW, -1, "turn your head to your right", "a little more to your right"),
    Move("up", PITCH, +1, "tilt your head up", "a little higher"),
    Move("down", PITCH, -1, "tilt your head down", "a little lower"),
)}


def reading(frame: Any) -> np.ndarray | None:
    """The frame's value on every measure (:data:`MEASURES` order); None when it lacks
    any (no face, or a pose no head makes): such a frame is neither a move nor the
    centre."""
    values = [m.read(frame) for m in MEASURES.values()]
    return None if any(v is None for v in values) else np.array(values)


# Every line a person may read during a session (STATUS "guidance"), besides the
# moves' own words above: one vocabulary, shown as it is by every client.
GUIDANCE = {
    "no_face": "we cannot see your face: face the camera",
    "several_faces": "only one face in the picture, please",
    "look": "look at the camera",
    "hold": "hold it",
    "back": "now look at the camera again",
    "done": "done: keep looking at the camera",
}


def plausible(yaw: float, pitch: float) -> bool:
    """Whether a head can show this pose to a camera and the landmarks read it."""
    return (math.isfinite(yaw) and math.isfinite(pitch) and abs(yaw) <= MAX_YAW_DEG
            and abs(pitch) <= MAX_PITCH_DEG)


def parse_moves(text: str) -> tuple[str, ...]:
    """``"left,right"`` -> ``("left", "right")``; unknown names are refused."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in MOVES]
    if unknown or not names:
        raise ValueError(f"challenge moves must be among {', '.join(MOVES)}, not {text!r}")
    return names


def yaw_moves(moves: Sequence[str]) -> int:
    """How many of ``moves`` turn the head (on the yaw measure: the relief check reads
    head turns)."""
    return sum(MOVES[m].measure.name == YAW.name for m in moves)


def draw_challenge(moves: Sequence[str], length: int,
                   pick: Callable[[Sequence[str]], str] = secrets.choice,
                   min_turns: int = 0) -> tuple[str, ...]:
    """``length`` moves drawn from ``moves`` with ``pick`` (by default the OS's
    cryptographic randomness: a challenge must not be predictable). Repeats are
    allowed (a return to the centre separates them), but not the same move all along
    when there is a choice; at least ``min_turns`` of them turn the head (yaw: the
    relief check reads head turns), as far as ``moves`` and ``length`` allow."""
    needed = min(min_turns, length) if yaw_moves(moves) else 0
    while True:
        drawn = tuple(pick(list(moves)) for _ in range(length))
        if _allowed(drawn, moves, needed):
            return drawn


def _allowed(drawn: Sequence[str], moves: Sequence[str], turns: int) -> bool:
    varied = len(set(moves)) == 1 or len(drawn) < 2 or len(set(drawn)) > 1
    return varied and yaw_moves(drawn) >= turns


def possible_challenges(moves: Sequence[str], length: int, min_turns: int = 0
                        ) -> tuple[tuple[str, ...], ...]:
    """Every challenge :func:`draw_challenge` can draw."""
    import itertools

    distinct = tuple(dict.fromkeys(moves))
    needed = min(min_turns, length) if yaw_moves(distinct) else 0
    return tuple(c for c in itertools.product(distinct, repeat=length)
                 if _allowed(c, distinct, needed))


def zone_of(offset: np.ndarray, previous: str, moves: Sequence[str], amplitude: float,
            centre: float) -> str:
    """The zone of one offset from the baseline (:data:`MEASURES` order), given the
    previous: a move's zone is entered at ``amplitude`` and left within ``centre`` on its
    measure. Past the amplitude on two measures (a tilt that also turns a little), the
    move that went furthest wins."""
    reached = [(far, n) for n in moves if (far := MOVES[n].along(offset)) >= amplitude]
    if reached:
        return max(reached)[1]
    if previous != CENTRE and MOVES[previous].along(offset) > centre:
        return previous
    return CENTRE


@dataclass
class Track:
    """The zones of a trajectory so far (fed one offset at a time, None: no pose)."""

    moves: tuple[str, ...]
    amplitude: float
    centre: float
    min_hold: int
    zone: str = CENTRE
    run: int = 0
    counted: str = CENTRE
    last: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.found: list[str] = []

    def feed(self, offset: np.ndarray | None) -> None:
        if offset is None:
            return
        self.last = np.asarray(offset, dtype=np.float64)
        new = zone_of(self.last, self.zone, self.moves, self.amplitude, self.centre)
        self.run = self.run + 1 if new == self.zone else 1
        self.zone = new
        if self.run >= self.min_hold and self.zone != self.counted:
            self.counted = self.zone
            if self.zone != CENTRE:
                self.found.append(self.zone)


def events(offsets: Sequence[np.ndarray | None], moves: Sequence[str], amplitude: float,
           centre: float, min_hold: int) -> list[str]:
    """The move events of a trajectory of offsets (None: no reading in that frame, no face
    or no plausible pose, which neither breaks nor extends a hold)."""
    track = Track(tuple(moves), amplitude, centre, min_hold)
    for offset in offsets:
        track.feed(offset)
    return track.found


def natural(event: str, challenge: Sequence[str], done: int) -> bool:
    """Whether ``event``, not the move asked next (``challenge[done]``), is movement a
    person makes on the way: a move on another measure than the one asked, or the move
    just made once more."""
    other_measure = MOVES[event].measure.name != MOVES[challenge[done]].measure.name
    return other_measure or (done > 0 and event == challenge[done - 1])


def progress(found: Sequence[str], challenge: Sequence[str], forgiven: int = 0) -> int:
    """How many moves of the challenge were made in order before a wrong event; at most
    ``forgiven`` natural ones (:func:`natural`) on the way; after the last, any."""
    done = spared = 0
    for event in found:
        if done >= len(challenge):
            break
        if event == challenge[done]:
            done += 1
        elif spared < forgiven and natural(event, challenge, done):
            spared += 1
        else:
            break
    return done


def guidance(track: Track, challenge: Sequence[str], done: int) -> str:
    """What to tell the person after the last frame with a pose (``track``), with
    ``done`` moves of ``challenge`` made: words, never angles."""
    if track.last is None:
        return GUIDANCE["look"]
    if done >= len(challenge):
        return GUIDANCE["done"] if track.zone == CENTRE else GUIDANCE["back"]
    move = MOVES[challenge[done]]
    if track.zone == move.name and track.counted != move.name:
        return GUIDANCE["hold"]
    if track.zone != CENTRE or track.counted != CENTRE:
        return GUIDANCE["back"]  # a move made (or a wrong one): the centre first
    if move.along(track.last) > track.centre:
        return move.more
    return move.instruction
