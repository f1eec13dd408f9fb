"""Per-face quality figures: sharpness, brightness, contrast and head pose from 5 landmarks.

Head pose is an estimate from the eyes and the nose tip against a mean 3D face
(millimetres, proportions of the ArcFace template, typical depths), in closed
form under weak perspective. Exact for the mean face; for real faces good to
several degrees near frontal and coarse beyond about 40 degrees: enough to tell
a frontal selfie from a turned or tilted head, not a measurement instrument.
"""

from __future__ import annotations

import math

import numpy as np

# Mean face, x to the image right, y down, z away from the camera; nose tip at the origin.
# Eye distance 64 mm; vertical proportions from the ArcFace template.
FACE_MODEL_3D = np.array(
    [[-32.0, -36.6, 27.0],  # left eye (image left)
     [32.0, -36.6, 27.0],  # right eye
     [0.0, 0.0, 0.0],  # nose tip
     [-26.5, 37.3, 22.0],  # left mouth corner
     [26.5, 37.3, 22.0]],  # right mouth corner
    dtype=np.float64,
)

LUMA = np.array([0.299, 0.587, 0.114])


def luma(rgb: np.ndarray) -> np.ndarray:
    return rgb.astype(np.float64) @ LUMA


def sharpness(gray: np.ndarray) -> float:
    """Variance of the 4-neighbour Laplacian (0-255 scale): low means blurred."""
    g = gray.astype(np.float64)
    lap = (g[:-2, 1:-1] + g[2:, 1:-1] + g[1:-1, :-2] + g[1:-1, 2:]) - 4 * g[1:-1, 1:-1]
    return float(lap.var())


# Weights of the landmarks in the pose fit. Mouth corners move with expression:
# measured on real photos, a broad smile read as a head tilted down by 30-40
# degrees at full weight and still at weight 0.2, so they are left out; eyes and
# nose tip (six equations, six unknowns) determine the pose.
POSE_WEIGHTS = np.array([1.0, 1.0, 1.0, 0.0, 0.0])


def head_pose(landmarks: np.ndarray) -> tuple[float, float, float]:
    """(yaw, pitch, roll) in degrees from 5 landmarks in image pixels.

    Signs: yaw > 0 when the face turns towards the image's right, pitch > 0 when it
    tilts up, roll > 0 when it tilts clockwise in the image. A weighted
    Gauss-Newton fit of the mean face under weak perspective (scale, rotation,
    shift: six unknowns), started from the closed-form eyes-and-nose estimate.
    """
    points = np.asarray(landmarks, dtype=np.float64).reshape(5, 2)
    params = _initial_pose(points)
    weights = np.repeat(np.sqrt(POSE_WEIGHTS), 2)
    for _ in range(20):
        residual = (_project(params) - points).ravel() * weights
        jacobian = np.empty((10, 6))
        for k in range(6):
            step = np.zeros(6)
            step[k] = 1e-5
            moved = (_project(params + step) - points).ravel() * weights
            jacobian[:, k] = (moved - residual) / 1e-5
        delta = np.linalg.lstsq(jacobian, -residual, rcond=None)[0]
        params += delta
        if np.abs(delta[:3]).max() < 1e-6:
            break
    yaw, pitch, roll = (math.degrees(_wrap(v)) for v in params[:3])
    return (yaw, pitch, roll)


def _wrap(angle: float) -> float:
    return (angle + math.pi) % (2 * math.pi) - math.pi


def _project(params: np.ndarray) -> np.ndarray:
    yaw, pitch, roll, log_scale, tx, ty = params
    rotation = rotation_matrix(math.degrees(yaw), math.degrees(pitch), math.degrees(roll))
    return math.exp(log_scale) * (FACE_MODEL_3D @ rotation.T)[:, :2] + np.array([tx, ty])


def _initial_pose(points: np.ndarray) -> np.ndarray:
    """Closed form from the eyes and the nose tip: roll from the eye line, yaw and
    pitch from the nose tip's offset from the eye midpoint (exact for one axis)."""
    left, right, nose = points[0], points[1], points[2]
    eye_vector = right - left
    roll = math.atan2(eye_vector[1], eye_vector[0])
    c, s = math.cos(-roll), math.sin(-roll)
    offset = np.array([[c, -s], [s, c]]) @ (nose - (left + right) / 2)
    eye_distance = max(float(np.linalg.norm(eye_vector)), 1e-6)
    model_iod = FACE_MODEL_3D[1, 0] - FACE_MODEL_3D[0, 0]
    depth = FACE_MODEL_3D[0, 2] - FACE_MODEL_3D[2, 2]  # eyes behind the nose tip
    height = FACE_MODEL_3D[2, 1] - FACE_MODEL_3D[0, 1]  # nose tip below the eyes
    yaw = math.atan(offset[0] / eye_distance * model_iod / depth)
    below = offset[1] / eye_distance * model_iod * math.cos(yaw)
    pitch = math.acos(max(-1.0, min(1.0, below / math.hypot(height, depth))))
    pitch -= math.atan2(depth, height)
    scale = eye_distance / (model_iod * max(math.cos(yaw), 0.1))
    shift = nose - scale * FACE_MODEL_3D[2, :2]
    return np.array([yaw, pitch, roll, math.log(max(scale, 1e-6)), shift[0], shift[1]])


def rotation_matrix(yaw: float, pitch: float, roll: float) -> np.ndarray:
    """The rotation :func:`head_pose` reports as (yaw, pitch, roll) degrees (for tests/tools)."""
    y, p, r = (math.radians(v) for v in (-yaw, -pitch, roll))
    ry = np.array([[math.cos(y), 0, math.sin(y)], [0, 1, 0], [-math.sin(y), 0, math.cos(y)]])
    rx = np.array([[1, 0, 0], [0, math.cos(p), -math.sin(p)], [0, math.sin(p), math.cos(p)]])
    rz = np.array([[math.cos(r), -math.sin(r), 0], [math.sin(r), math.cos(r), 0], [0, 0, 1]])
    return rz @ rx @ ry


def face_quality(face: np.ndarray, landmarks: np.ndarray, box: np.ndarray,
                 image_size: tuple[int, int]) -> dict[str, float]:
    """Figures of one aligned face (``face``: [112, 112, 3] RGB) and its input geometry."""
    gray = luma(face)
    # Judge sharpness and light on the inner face, not on the background corners.
    inner = gray[16:104, 16:96]
    yaw, pitch, roll = head_pose(landmarks)
    width, height = float(box[2] - box[0]), float(box[3] - box[1])
    eyes = np.asarray(landmarks, dtype=np.float64).reshape(5, 2)[:2]
    return {
        "sharpness": round(sharpness(inner), 2),
        "brightness": round(float(inner.mean()) / 255.0, 4),
        "contrast": round(float(inner.std()) / 255.0, 4),
        "face_width": round(width, 1),
        "face_height": round(height, 1),
        "inter_eye_distance": round(float(np.linalg.norm(eyes[1] - eyes[0])), 1),
        "face_area_fraction": round(width * height / float(image_size[0] * image_size[1]), 4),
        "yaw": round(yaw, 1),
        "pitch": round(pitch, 1),
        "roll": round(roll, 1),
    }
