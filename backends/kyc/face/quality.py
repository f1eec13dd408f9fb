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
    tilts up, roll > 0 when it tilts clockwise in the image. A weighted Gauss-Newton
    fit of the mean face under weak perspective to the eyes and the nose tip (six
    unknowns, six equations) from the closed-form start, and a fit with the roll held
    at the eye line's angle. Six equations for six unknowns have more than one exact
    solution, and from the closed-form start alone a head tilted down landed on a
    wrong one, turned and rolled as well (the canonical mesh's projected points: a
    30-degree tilt down read as 23 degrees of yaw and 12 of roll). When the two fits
    disagree (:data:`AGREE`), the full fit is also run from the level one, and of them
    all the one whose mouth corners fall nearest the landmarks' is kept. Steps are
    bounded (:data:`MAX_STEP`);
    landmarks no face has (a detector's misfit on a strongly turned or unreal face)
    can send a fit astray: it then stops, and the best-fitting of the estimates is
    reported. Always finite; a pose no head makes is the caller's to refuse
    (kyc.liveness.challenge.plausible).
    """
    points = np.asarray(landmarks, dtype=np.float64).reshape(5, 2)
    start = _initial_pose(points)
    full = _fit(points, start, ALL)
    level = _fit(points, start, [0, 1, 3, 4, 5])  # roll held at the eye line's angle
    if np.all(np.isfinite(full)) and np.abs(full[:2] - level[:2]).max() < AGREE:
        best = full
    else:
        # Which solution: the one that also puts the mouth corners nearest where they
        # are (left out of the fit, not out of the choice: a wrong solution misplaces
        # them by far more than a smile moves them).
        candidates = [full, level, _fit(points, level, ALL), start]
        misfits = [_misfit_norm(points, params, CHOICE_WEIGHTS) for params in candidates]
        best = candidates[int(np.argmin(misfits))]
    yaw, pitch, roll = (math.degrees(_wrap(v)) for v in best[:3])
    return (yaw, pitch, roll)


ALL = [0, 1, 2, 3, 4, 5]
AGREE = math.radians(3.0)  # the two fits agree on yaw and pitch within this: one solution
CHOICE_WEIGHTS = np.ones(5)


def _misfit_norm(points: np.ndarray, params: np.ndarray,
                 weights: np.ndarray = POSE_WEIGHTS) -> float:
    if not np.all(np.isfinite(params)):
        return math.inf
    root = np.repeat(np.sqrt(weights), 2)
    return float(np.linalg.norm((_project(params) - points).ravel() * root))


def _fit(points: np.ndarray, start: np.ndarray, free: list[int]) -> np.ndarray:
    """Gauss-Newton from ``start`` on the unknowns ``free`` (the others held); the
    Jacobian by forward differences, every trial projected in one batch."""
    weights = np.repeat(np.sqrt(POSE_WEIGHTS), 2)
    params = start.copy()
    steps = np.zeros((len(free), 6))
    steps[np.arange(len(free)), free] = 1e-5
    for _ in range(30):
        trials = np.vstack([params, params + steps])
        misfits = (_project_many(trials) - points).reshape(len(trials), 10) * weights
        residual = misfits[0]
        jacobian = ((misfits[1:] - residual) / 1e-5).T
        delta = np.linalg.lstsq(jacobian, -residual, rcond=None)[0]
        if not np.all(np.isfinite(delta)):
            break
        params[free] += np.clip(delta, -MAX_STEP[free], MAX_STEP[free])
        if np.abs(delta[: sum(k < 3 for k in free)]).max() < 1e-6:  # the angles settled
            break
    return params


# The largest change of each unknown in one Gauss-Newton step: radians for the
# angles, natural log for the scale, pixels for the shift.
MAX_STEP = np.array([0.5, 0.5, 0.5, 1.0, 1e4, 1e4])
# The scale may not leave e^-30..e^30 of its start (a runaway fit, not a face).
MAX_LOG_SCALE = 30.0


def _wrap(angle: float) -> float:
    return (angle + math.pi) % (2 * math.pi) - math.pi


def _project(params: np.ndarray) -> np.ndarray:
    return _project_many(np.asarray(params, np.float64)[None])[0]


def _project_many(params: np.ndarray) -> np.ndarray:
    """[N, 5, 2]: the mean face seen under each of N poses (yaw, pitch, roll in
    radians, log scale, shift), as :func:`rotation_matrix` turns it."""
    cy, sy = np.cos(-params[:, 0]), np.sin(-params[:, 0])
    cp, sp = np.cos(-params[:, 1]), np.sin(-params[:, 1])
    cr, sr = np.cos(params[:, 2]), np.sin(params[:, 2])
    # The first two rows of Rz(roll) Rx(pitch) Ry(yaw), written out (what the image sees).
    rows = np.empty((len(params), 2, 3))
    rows[:, 0, 0] = cr * cy - sr * sp * sy
    rows[:, 0, 1] = -sr * cp
    rows[:, 0, 2] = cr * sy + sr * sp * cy
    rows[:, 1, 0] = sr * cy + cr * sp * sy
    rows[:, 1, 1] = cr * cp
    rows[:, 1, 2] = sr * sy - cr * sp * cy
    scale = np.exp(np.clip(params[:, 3], -MAX_LOG_SCALE, MAX_LOG_SCALE))
    turned = FACE_MODEL_3D @ rows.transpose(0, 2, 1)
    return scale[:, None, None] * turned + params[:, None, 4:6]


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
                 image_size: tuple[int, int], pose: bool = True) -> dict[str, float]:
    """Figures of one aligned face (``face``: [112, 112, 3] RGB) and its input geometry
    (and its head pose, unless ``pose`` is false)."""
    gray = luma(face)
    # Judge sharpness and light on the inner face, not on the background corners.
    inner = gray[16:104, 16:96]
    width, height = float(box[2] - box[0]), float(box[3] - box[1])
    eyes = np.asarray(landmarks, dtype=np.float64).reshape(5, 2)[:2]
    figures = {
        "sharpness": round(sharpness(inner), 2),
        "brightness": round(float(inner.mean()) / 255.0, 4),
        "contrast": round(float(inner.std()) / 255.0, 4),
        "face_width": round(width, 1),
        "face_height": round(height, 1),
        "inter_eye_distance": round(float(np.linalg.norm(eyes[1] - eyes[0])), 1),
        "face_area_fraction": round(width * height / float(image_size[0] * image_size[1]), 4),
    }
    if pose:
        yaw, pitch, roll = head_pose(landmarks)
        figures.update({"yaw": round(yaw, 1), "pitch": round(pitch, 1), "roll": round(roll, 1)})
    return figures
