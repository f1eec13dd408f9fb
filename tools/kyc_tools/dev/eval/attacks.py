"""Presentation attacks that answer the challenge, rendered from one photo: the attack
species of ``kyc eval liveness`` and of the tests.

Each species is a way to present ONE still photo of the person to a camera while
making the moves asked: the attacker turns the sheet or the screen as a head would
turn. The renderings are geometric (a pinhole camera, a plane or a cylinder turned in
front of it) with the medium's own marks (a screen's pixel grid and glare, its
bezel), not photographs of real prints: what they test is whether the liveness
verdict needs a solid face, which none of them is. ``render_3d`` is the exception: a
3-D head rendered from the photo (kyc_tools.dev.synthetic.liveness) is an INJECTION (frames
made by software), not a presentation, and is measured to show what the server cannot
see (SECURITY.md).

:data:`SPECIES` is the one vocabulary of species (names, channel, words), used by the
sample writer, the report and the tests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from kyc.liveness.challenge import MOVES, PITCH, YAW
from kyc_tools.dev.synthetic.liveness import cylinder_warp, encode, frame_variant

PRESENTATION, INJECTION = "presentation", "injection"


@dataclass(frozen=True)
class Species:
    name: str
    channel: str  # PRESENTATION (media shown to a camera) or INJECTION (frames by software)
    what: str


SPECIES = {s.name: s for s in (
    Species("print_turned", PRESENTATION,
            "a flat print of the photo turned and tilted as each move asks"),
    Species("screen_turned", PRESENTATION,
            "a phone screen showing the photo (pixel grid, glare, bezel), turned as asked"),
    Species("print_curved", PRESENTATION,
            "a print wrapped round a cylinder (a bottle) turned as asked"),
    Species("photo_warp", PRESENTATION,
            "the photo warped as a curved sheet so its landmarks move as in a head turn "
            "(this project's former demo), shown to the camera"),
    Species("print_rotated", PRESENTATION, "a print turned in its own plane"),
    Species("print_held_still", PRESENTATION, "a print held still in front of the camera"),
    Species("replay_other_challenge", PRESENTATION,
            "a recording of the person making other moves than the challenge's"),
    Species("face_swap", PRESENTATION, "another person's face takes over mid-session"),
    Species("render_3d", INJECTION,
            "frames made by software: the photo's face on a 3-D face mesh, turned as "
            "asked (what a server cannot tell from a camera)"),
)}

# How far the attacker turns the medium for a move (degrees): a landmark detector reads
# a turned print as a third to a half of its turn, so the attacker turns it well past
# the 12 degrees asked of a head. A flat sheet turned about its vertical axis reads as
# a head turned the OTHER way (perspective: its near side grows), so the attacker turns
# it that way; tilted back it reads as a head tilted up, and no tilt of a sheet reads as
# a head tilted down (measured on the test photos).
TURN_DEG = 50.0
TILT_DEG = 45.0
MEDIUM_DEG = {YAW.name: TURN_DEG, PITCH.name: TILT_DEG}  # by the move's measure


def _pose(move: str | None, amount: float = 1.0) -> tuple[float, float]:
    """The (yaw, pitch) the medium takes for ``move`` (declared in MOVES) at ``amount``."""
    if move is None:
        return (0.0, 0.0)
    spec = MOVES[move]
    if spec.measure.name not in MEDIUM_DEG:
        raise ValueError(f"move {move!r} is made on {spec.measure.name!r}: a medium is turned "
                         f"or tilted ({YAW.name}, {PITCH.name}) only")
    pose = {YAW.name: 0.0, PITCH.name: 0.0,
            spec.measure.name: spec.sign * amount * MEDIUM_DEG[spec.measure.name]}
    return (pose[YAW.name], pose[PITCH.name])


def plane_turn(image: np.ndarray, yaw: float = 0.0, pitch: float = 0.0,
               distance: float = 1.5, background: int = 40) -> np.ndarray:
    """``image`` as a flat sheet ``distance`` widths from a pinhole camera (focal length
    one width), turned ``yaw`` degrees about its vertical axis and ``pitch`` about its
    horizontal one (signs as head_pose reports a head's)."""
    height, width = image.shape[:2]
    focal, depth = float(width), distance * width
    a, b = math.radians(yaw), math.radians(-pitch)
    ry = np.array([[math.cos(a), 0, math.sin(a)], [0, 1, 0], [-math.sin(a), 0, math.cos(a)]])
    rx = np.array([[1, 0, 0], [0, math.cos(b), -math.sin(b)], [0, math.sin(b), math.cos(b)]])
    rotation = rx @ ry
    corners = np.float32([[0, 0], [width, 0], [width, height], [0, height]])
    seen = []
    for u, v in corners:
        point = rotation @ np.array([(u - width / 2) * depth / focal,
                                     (v - height / 2) * depth / focal, 0.0])
        point[2] += depth
        seen.append((width / 2 + focal * point[0] / point[2],
                     height / 2 + focal * point[1] / point[2]))
    matrix = cv2.getPerspectiveTransform(corners, np.float32(seen))
    return cv2.warpPerspective(image, matrix, (width, height), borderMode=cv2.BORDER_CONSTANT,
                               borderValue=(background,) * 3)


def cylinder_print(image: np.ndarray, yaw: float = 0.0, radius: float = 0.4,
                   distance: float = 1.5) -> np.ndarray:
    """``image`` printed on a sheet wrapped round a vertical cylinder (``radius``
    widths) ``distance`` widths from a pinhole camera, turned ``yaw`` degrees."""
    height, width = image.shape[:2]
    focal, depth, reach = float(width), distance * width, radius * width
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float64)
    dx, dy = (xs - width / 2) / focal, (ys - height / 2) / focal
    a, b, c = dx * dx + 1, -2 * depth, depth * depth - reach * reach
    disc = b * b - 4 * a * c
    hit = disc >= 0
    t = (-b - np.sqrt(np.where(hit, disc, 0.0))) / (2 * a)
    angle = np.arctan2(t * dx, depth - t) - math.radians(yaw)
    hit &= np.abs(angle) < math.pi / 2
    map_x = np.where(hit, width / 2 + angle * reach * focal / depth, -1).astype(np.float32)
    map_y = np.where(hit, height / 2 + t * dy * focal / depth, -1).astype(np.float32)
    return cv2.remap(image, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT,
                     borderValue=(40, 40, 40))


def screen(image: np.ndarray, k: int = 0) -> np.ndarray:
    """``image`` on a phone screen: the pixel grid's moiré, a glare, a dark bezel."""
    height, width = image.shape[:2]
    out = image.astype(np.float32)
    ys, xs = np.mgrid[0:height, 0:width]
    period = 3.0 + (k % 3) * 0.7
    out *= 1 + 0.08 * np.sin(2 * np.pi * (xs * 0.97 + ys * 0.23) / period)[..., None]
    gx, gy = width * (0.3 + 0.1 * (k % 4)), height * 0.3
    out += 90 * np.exp(-(((xs - gx) / (0.25 * width)) ** 2
                         + ((ys - gy) / (0.15 * height)) ** 2))[..., None]
    out = np.clip(out, 0, 255).astype(np.uint8)
    bezel = max(4, width // 25)
    out[:bezel], out[-bezel:], out[:, :bezel], out[:, -bezel:] = 15, 15, 15, 15
    return out


Render = Callable[[np.ndarray, Sequence[float], str | None, float], np.ndarray]


def _print_turned(image, box, move, amount):
    yaw, pitch = _pose(move, amount)
    return plane_turn(image, -yaw, pitch, distance=1.2)


def _screen_turned(image, box, move, amount):
    yaw, pitch = _pose(move, amount)
    return plane_turn(screen(image), -yaw, pitch, distance=1.0)


def _print_curved(image, box, move, amount):
    yaw, pitch = _pose(move, amount)
    if pitch:  # a bottle tilted towards or away from the camera: a plane's tilt
        return plane_turn(cylinder_print(image), 0.0, pitch, distance=1.2)
    return cylinder_print(image, yaw * 0.8)


def _photo_warp(image, box, move, amount):
    yaw, pitch = _pose(move, amount)
    return cylinder_warp(image, box, yaw * 0.8) if yaw else plane_turn(image, 0.0, pitch,
                                                                        distance=1.2)


def _print_rotated(image, box, move, amount):
    if move is None:
        return image
    height, width = image.shape[:2]
    angle = 30.0 * amount * MOVES[move].sign
    matrix = cv2.getRotationMatrix2D((width / 2, height / 2), angle, 1.0)
    return cv2.warpAffine(image, matrix, (width, height), borderValue=(40, 40, 40))


RENDERS: dict[str, Render] = {
    "print_turned": _print_turned, "screen_turned": _screen_turned,
    "print_curved": _print_curved, "photo_warp": _photo_warp,
    "print_rotated": _print_rotated,
}
# A move as the attacker makes it, in frames: on the way, held, on the way back, facing.
RAMP, HOLD, REST = (0.5,), 3, 3


class MediumPerformer:
    """An attacker answering each move asked with a medium (``species`` of
    :data:`RENDERS`) holding ``image``: ``performer(move)`` -> JPEG frames, as
    kyc_tools.dev.synthetic.liveness.Performer for a rendered head."""

    def __init__(self, species: str, image: np.ndarray, box: Sequence[float]) -> None:
        self.render, self.image, self.box = RENDERS[species], image, box
        self.sent = 0
        self._cache: dict[tuple[str | None, float], np.ndarray] = {}

    def _frame(self, move: str | None, amount: float) -> bytes:
        key = (move, amount)
        if key not in self._cache:
            self._cache[key] = self.render(self.image, self.box, move, amount)
        quality, shift = frame_variant(self.sent)
        self.sent += 1
        return encode(self._cache[key], quality=quality, shift=shift)

    def __call__(self, move: str | None) -> list[bytes]:
        if move is None:
            return [self._frame(None, 0.0) for _ in range(REST)]
        steps = list(RAMP) + [1.0] * HOLD + list(reversed(RAMP))
        return [self._frame(move, a) for a in steps] + [self._frame(None, 0.0)
                                                      for _ in range(REST)]
