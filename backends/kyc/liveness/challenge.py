"""The active challenge: an ordered list of head turns, and finding them in a pose trajectory.

Poses come from ``kyc.face.quality.head_pose`` on the detector's landmarks, in the
frame as the camera sends it (not mirrored): yaw > 0 when the face turns towards
the image's right, which is the person's own LEFT; pitch > 0 when it tilts up.

A trajectory is cut into zones with hysteresis, relative to the session's
baseline (the median pose of its first frames with a face):

- a move's zone is entered when the angle on its axis passes ``amplitude``
  degrees in its direction, and left only when it comes back within ``centre``;
- anywhere else is the centre zone;
- a zone counts once it has held ``min_hold`` consecutive frames.

The events are the counted move zones in order, one per visit: ``left, centre,
left`` is two lefts, ``left, left`` one. The challenge passes only when the events
are exactly the challenge: a person who makes every move in turn, or the right
moves in another order, does not pass.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

CENTRE = "centre"


@dataclass(frozen=True)
class Move:
    name: str
    axis: int  # 0 yaw, 1 pitch
    sign: int  # +1 or -1 on that axis
    instruction: str


MOVES = {
    "left": Move("left", 0, +1, "turn your head to your left"),
    "right": Move("right", 0, -1, "turn your head to your right"),
    "up": Move("up", 1, +1, "tilt your head up"),
    "down": Move("down", 1, -1, "tilt your head down"),
}


def parse_moves(text: str) -> tuple[str, ...]:
    """``"left,right"`` -> ``("left", "right")``; unknown names are refused."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in MOVES]
    if unknown or not names:
        raise ValueError(f"challenge moves must be among {', '.join(MOVES)}, not {text!r}")
    return names


def draw_challenge(moves: Sequence[str], length: int,
                   pick: Callable[[Sequence[str]], str] = secrets.choice) -> tuple[str, ...]:
    """``length`` moves drawn from ``moves`` with ``pick`` (by default the OS's
    cryptographic randomness: a challenge must not be predictable). Repeats are
    allowed (a return to the centre separates them), but not the same move all along
    when there is a choice."""
    while True:
        drawn = tuple(pick(list(moves)) for _ in range(length))
        if len(set(moves)) == 1 or len(set(drawn)) > 1:
            return drawn


def zone_of(offset: np.ndarray, previous: str, moves: Sequence[str], amplitude: float,
            centre: float) -> str:
    """The zone of one pose offset (yaw, pitch) from the baseline, given the previous:
    a move's zone is entered at ``amplitude`` and left within ``centre`` on its axis."""
    for name in moves:
        move = MOVES[name]
        if move.sign * offset[move.axis] >= amplitude:
            return name
    if previous != CENTRE:
        move = MOVES[previous]
        if move.sign * offset[move.axis] > centre:
            return previous
    return CENTRE


def events(offsets: Sequence[np.ndarray | None], moves: Sequence[str], amplitude: float,
           centre: float, min_hold: int) -> list[str]:
    """The move events of a trajectory of pose offsets (None: no face in that frame,
    which neither breaks nor extends a hold)."""
    found: list[str] = []
    zone, run, counted = CENTRE, 0, CENTRE
    for offset in offsets:
        if offset is None:
            continue
        new = zone_of(np.asarray(offset, dtype=np.float64), zone, moves, amplitude, centre)
        run = run + 1 if new == zone else 1
        zone = new
        if run >= min_hold and zone != counted:
            counted = zone
            if zone != CENTRE:
                found.append(zone)
    return found


def progress(found: Sequence[str], challenge: Sequence[str]) -> int:
    """How many moves of the challenge were made in order before a wrong one."""
    done = 0
    for event in found:
        if done >= len(challenge) or event != challenge[done]:
            break
        done += 1
    return done
