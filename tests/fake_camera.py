"""Videos for Chromium's fake camera (``--use-file-for-fake-video-capture=FILE.y4m``).

A y4m file is a one-line header and raw I420 frames: the container is written here
(a few lines, no encoder needed), the colour conversion is OpenCV's. Chromium plays
the file from its first frame when the page opens the camera, in a loop.

The head turns are rendered from one real photo as 3-D head turns on the canonical
face mesh (kyc_tools.dev.synthetic.liveness), as the liveness tests' sessions are: NOT video of
a live person.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np

from kyc_tools.dev.synthetic.liveness import HeadModel, move_pose

FPS = 10
SIZE = (480, 640)  # width, height: a phone held upright


def fitted(image: np.ndarray, points: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """``image`` scaled to cover :data:`SIZE` and cropped to it, and ``points`` (the
    face's landmarks, [x, y] rows) in it."""
    width, height = SIZE
    scale = max(width / image.shape[1], height / image.shape[0])
    resized = cv2.resize(image, (round(image.shape[1] * scale), round(image.shape[0] * scale)),
                         interpolation=cv2.INTER_AREA)
    x0 = (resized.shape[1] - width) // 2
    y0 = (resized.shape[0] - height) // 2
    frame = np.ascontiguousarray(resized[y0:y0 + height, x0:x0 + width])
    moved = np.asarray(points, np.float64).reshape(-1, 2) * scale - [x0, y0]
    return frame, moved


def challenge_film(image: np.ndarray, landmarks: Sequence, moves: Sequence[str],
                   rest_s: float = 1.0, hold_s: float = 0.8) -> list[np.ndarray]:
    """A person facing the camera, then each move held ``hold_s`` and back to the
    camera for ``rest_s`` (1.5 s of rest first, 2 s at the end)."""
    frame, face = fitted(image, landmarks)
    head = HeadModel(frame, face)
    turned = {m: head.render(*move_pose(m)) for m in set(moves)}
    film = [frame] * round(1.5 * FPS)
    for move in moves:
        film += [turned[move]] * round(hold_s * FPS) + [frame] * round(rest_s * FPS)
    return film + [frame] * round(1.0 * FPS)


def still_film(image: np.ndarray, landmarks: Sequence, seconds: float = 2.0
               ) -> list[np.ndarray]:
    """A photo held still in front of the camera."""
    frame, _ = fitted(image, landmarks)
    return [frame] * round(seconds * FPS)


def write_y4m(path: Path, frames: Sequence[np.ndarray], fps: int = FPS) -> Path:
    """RGB frames (all of one even size) as a y4m video."""
    height, width = frames[0].shape[:2]
    with path.open("wb") as out:
        out.write(f"YUV4MPEG2 W{width} H{height} F{fps}:1 Ip A1:1 C420jpeg\n".encode())
        for frame in frames:
            out.write(b"FRAME\n")
            out.write(cv2.cvtColor(frame, cv2.COLOR_RGB2YUV_I420).tobytes())
    return path
