"""The head pose of a face from MediaPipe's 468 landmarks (the ``face_landmarks`` model).

Five landmarks cannot tell a head tilted sideways from one turned: measured on the
real clips of ``kyc eval liveness``, a woman tilting her head read as 12-15 degrees
of turn from the five points, and as 4-8 from the 468, against 11 for her real turn
(docs/eval/README.md). So the liveness session reads its moves from these.

1. :func:`roi` cuts the face's region of interest from the five landmarks the
   detector gives, as MediaPipe does from its own detector: a square about the
   eyes' and mouth's midpoint, :data:`ROI_SPAN` times their distance, upright along
   the eye line (measured: MediaPipe's own second-pass region is 3.9 times that
   distance, median of 1,950 real frames);
2. the model places the 468 points in that crop; :meth:`Roi.to_image` takes them
   back to the frame;
3. :func:`mesh_pose` fits MediaPipe's canonical face mesh (the same 468 vertices,
   ``canonical_face.npy``) to them (OpenCV's solvePnP, a camera of long focal
   length: a selfie's face is small against its distance) and reads yaw, pitch and
   roll with :func:`kyc.face.quality.head_pose`'s signs: yaw > 0 towards the image's
   right, pitch > 0 up, roll > 0 clockwise;
4. :func:`degrees` turns the fit's yaw and pitch into degrees of the head. The
   landmark model draws a turned face back towards the frontal mean shape it learnt:
   renders of a face turned a known angle read about 0.6 of it (20 degrees read
   12-13), as an independent model, dlib's 68 landmarks, reads 0.72 of it. The knots
   (:data:`POSE_KNOTS`) are the mean readings of renders of known angles, measured by
   ``kyc eval pose`` (docs/liveness.md).

Pure numpy and OpenCV; nothing here logs or keeps what it is given.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from importlib import resources

import cv2
import numpy as np

SIDE = 192  # the model's input square
ROI_SPAN = 3.9  # the crop's side over the eye-to-mouth distance
MESH_FILE = "canonical_face.npy"
FOCAL_WIDTHS = 10.0  # the camera's focal length in image widths
# The fit's reading -> degrees of the head, per measure: (mean reading, degrees) of
# renders of known angles of ten faces of six people and their mirror images, measured
# by `kyc eval pose` on 2026-11-28 (docs/liveness.md: each person's renders read within
# 1 degree on average through knots fitted on the others'); interpolated between
# knots, extended beyond the last ones along their slope.
POSE_KNOTS: dict[str, tuple[tuple[float, float], ...]] = {
    "yaw": ((-16.0, -30.0), (-11.9, -20.0), (-6.0, -10.0), (0.0, 0.0), (6.4, 10.0),
            (12.4, 20.0), (17.1, 30.0)),
    "pitch": ((-21.1, -30.0), (-12.8, -20.0), (-5.8, -10.0), (0.0, 0.0), (5.6, 10.0),
              (11.9, 20.0), (18.5, 30.0)),
}
# Mesh (x right, y up, z to the camera) -> OpenCV's camera axes (y down, z away).
_TO_CAMERA = np.diag([1.0, -1.0, -1.0])


@dataclass(frozen=True)
class Roi:
    """Where a face's crop came from: ``matrix`` maps frame pixels to crop pixels."""

    matrix: np.ndarray  # [2, 3]

    def cut(self, pixels: np.ndarray) -> np.ndarray:
        """The crop, uint8 RGB [SIDE, SIDE, 3] (black outside the frame)."""
        return cv2.warpAffine(pixels, self.matrix, (SIDE, SIDE), flags=cv2.INTER_LINEAR,
                              borderMode=cv2.BORDER_CONSTANT)

    def to_image(self, points: np.ndarray) -> np.ndarray:
        """[n, 2] crop pixels -> frame pixels."""
        back = cv2.invertAffineTransform(self.matrix)
        return np.asarray(points, np.float64)[:, :2] @ back[:, :2].T + back[:, 2]


def roi(landmarks: np.ndarray) -> Roi:
    """The region of interest of a face from its five landmarks (eyes, nose tip, mouth
    corners, image left first)."""
    five = np.asarray(landmarks, np.float64).reshape(5, 2)
    eyes, mouth = five[:2].mean(axis=0), five[3:].mean(axis=0)
    line = five[1] - five[0]
    angle = math.atan2(line[1], line[0])
    scale = SIDE / max(float(np.linalg.norm(mouth - eyes)) * ROI_SPAN, 1e-6)
    c, s = math.cos(angle) * scale, math.sin(angle) * scale
    matrix = np.array([[c, s, 0.0], [-s, c, 0.0]])
    matrix[:, 2] = SIDE / 2 - matrix[:, :2] @ ((eyes + mouth) / 2)
    return Roi(matrix)


@functools.cache
def canonical_face() -> np.ndarray:
    """MediaPipe's canonical face mesh, [468, 3] float64 centimetres (kyc.face.mesh's
    axes), shipped as ``canonical_face.npy`` (made and checked by ``kyc models
    face-depth``, from the pinned mesh)."""
    with resources.files("kyc.face").joinpath(MESH_FILE).open("rb") as f:
        return np.load(f).astype(np.float64)


def _facing(image: np.ndarray, camera: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The fit's start: the face facing the camera, at the distance its size gives. From
    its own start the fit can land on the mirror solution behind the camera (measured
    on the canonical face: every pose read with the wrong signs, roll 180 degrees)."""
    faces = canonical_face()
    scale = float(np.ptp(faces[:, 0])) / max(float(np.ptp(image[:, 0])), 1e-6)  # cm a pixel
    off = (image.mean(axis=0) - camera[:2, 2]) * scale
    rvec = np.array([[math.pi], [0.0], [0.0]])  # mesh y up, z to the camera -> camera axes
    return rvec, np.array([[off[0]], [off[1]], [camera[0, 0] * scale]])


def mesh_pose(points: np.ndarray, width: int, height: int) -> tuple[float, float, float]:
    """(yaw, pitch, roll) in degrees of the 468 frame points [468, 2+] in a ``width`` x
    ``height`` frame; NaN when the fit fails (the caller refuses it as implausible)."""
    image = np.ascontiguousarray(np.asarray(points, np.float64)[:, :2])
    if image.shape != (468, 2) or not np.all(np.isfinite(image)):
        return (math.nan, math.nan, math.nan)
    focal = FOCAL_WIDTHS * width
    camera = np.array([[focal, 0, width / 2], [0, focal, height / 2], [0, 0, 1.0]])
    ok, rvec, _ = cv2.solvePnP(canonical_face(), image, camera, None, *_facing(image, camera),
                               useExtrinsicGuess=True, flags=cv2.SOLVEPNP_ITERATIVE)
    if not ok:
        return (math.nan, math.nan, math.nan)
    head = _TO_CAMERA @ cv2.Rodrigues(rvec)[0]  # the head's rotation, mesh axes
    yaw = math.degrees(math.atan2(head[0, 2], head[2, 2]))
    pitch = math.degrees(math.asin(max(-1.0, min(1.0, head[1, 2]))))
    roll = -math.degrees(math.atan2(head[1, 0], head[1, 1]))
    return (yaw, pitch, roll)


def through(knots: tuple[tuple[float, float], ...], value: float) -> float:
    """``value`` through piecewise-linear ``knots`` (reading, degrees), in order: between
    them interpolated, beyond the ends along the end segment's slope."""
    reads, degrees = np.array(knots).T
    if reads[0] <= value <= reads[-1]:
        return float(np.interp(value, reads, degrees))
    a, b = (0, 1) if value < reads[0] else (-2, -1)
    slope = (degrees[b] - degrees[a]) / (reads[b] - reads[a])
    edge = a if value < reads[0] else b
    return float(degrees[edge] + slope * (value - reads[edge]))


def degrees(measure: str, value: float) -> float:
    """The head's ``measure`` ("yaw" or "pitch") in degrees from the mesh fit's reading
    (:data:`POSE_KNOTS`)."""
    return through(POSE_KNOTS[measure], value)


def calibrated(yaw: float, pitch: float) -> tuple[float, float]:
    """The head's (yaw, pitch) in degrees from the mesh fit's (:func:`degrees`)."""
    return (degrees("yaw", yaw), degrees("pitch", pitch))
