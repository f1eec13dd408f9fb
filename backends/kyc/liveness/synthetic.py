"""Liveness frame sequences for tests and the benchmark, rendered from ONE real photo.

This is NOT video of a live person. A head turn is imitated by a documented
geometric warp: the face region is mapped onto a vertical cylinder (radius 0.75 of
the face box width, axis through the box centre) and the cylinder is rotated by
the yaw angle, so points near the face's midline (nose) move further sideways
than points near its edge (eyes, cheeks): the parallax a real head turn gives the
five landmarks. Measured through the detector and ``head_pose`` on the real test
photos: a 30-degree warp moves the estimated yaw by about 16 to 24 degrees, in
the sign of the warp (positive: the face turns to the image's right, the
person's own left). Pitch is not imitated: the warp does not move the landmarks
the way a real nod does.

Frames also differ by JPEG quality and a small shift, so no two are identical.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

import cv2
import numpy as np
from PIL import Image

TURN_DEG = {"left": 30.0, "right": -30.0}
RADIUS = 0.75  # cylinder radius, a fraction of the face box width


def head_turn(image: np.ndarray, box: Sequence[float], yaw_deg: float) -> np.ndarray:
    """``image`` (RGB uint8) with the face in ``box`` (x1, y1, x2, y2) turned by
    ``yaw_deg`` about a vertical axis (see the module docstring)."""
    height, width = image.shape[:2]
    x1, _, x2, _ = (float(v) for v in box)
    centre, radius = (x1 + x2) / 2, (x2 - x1) * RADIUS
    xs = np.arange(width, dtype=np.float64)
    u = np.clip((xs - centre) / radius, -1.0, 1.0)
    # The output column at angle phi shows what was at angle phi - yaw.
    source = np.sin(np.clip(np.arcsin(u) - math.radians(yaw_deg), -math.pi / 2, math.pi / 2))
    map_x = np.where(np.abs(xs - centre) < radius, centre + source * radius, xs)
    map_x = np.broadcast_to(map_x.astype(np.float32), (height, width))
    map_y = np.broadcast_to(np.arange(height, dtype=np.float32)[:, None], (height, width))
    return cv2.remap(image, np.ascontiguousarray(map_x), np.ascontiguousarray(map_y),
                     cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)


def encode(image: np.ndarray, quality: int, shift: int = 0) -> bytes:
    """JPEG bytes of ``image`` moved ``shift`` pixels right (edge repeated)."""
    if shift:
        image = np.concatenate([np.repeat(image[:, :1], shift, axis=1), image[:, :-shift]],
                               axis=1)
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def turn_angles(moves: Sequence[str], hold: int = 3, rest: int = 3) -> list[float]:
    """The yaw of each frame of a film of ``moves``: ``rest`` frames facing the
    camera, then for each move ``hold`` frames turned and ``rest`` frames back."""
    angles = [0.0] * rest
    for move in moves:
        angles += [TURN_DEG[move]] * hold + [0.0] * rest
    return angles


def frame_variant(k: int) -> tuple[int, int]:
    """(JPEG quality, pixel shift) of frame ``k``: consecutive frames differ, like a camera's."""
    return 88 + k % 8, k % 3


def turn_sequence(image: np.ndarray, box: Sequence[float], moves: Sequence[str],
                  hold: int = 3, rest: int = 3) -> list[bytes]:
    """Frames of a person making ``moves`` (``left``/``right``), as :func:`turn_angles`."""
    frames: list[bytes] = []
    for k, angle in enumerate(turn_angles(moves, hold, rest)):
        turned = head_turn(image, box, angle) if angle else image
        quality, shift = frame_variant(k)
        frames.append(encode(turned, quality=quality, shift=shift))
    return frames
