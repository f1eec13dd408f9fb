"""Is the face that turned a solid head? The relief seen in a head turn, measured from pixels.

A real head turn shows the parallax of a solid face: the nose moves against the
cheeks and the eyes, the lips against the chin. A print, a screen or a warp of one
photo is a plane or a simple surface, and moves as one (published approaches:
shared/notes/liveness-pad.md). The five landmarks cannot tell the two apart: the
detector places them where a turned face would have them, so a turned print reads
as a turned head (measured: its nose "parallax" from landmarks is 60-90% of a real
head's). Pixels can.

For a frame facing the camera (the baseline) and a frame turned on an axis:

1. both faces are cut out in a canonical square (:func:`face_view`: a similarity
   from the landmarks, grey levels) and the turned one is brought onto the baseline
   by the affine map of their five points: what is left is how the face's surface
   moved apart from any flat motion;
2. the dense optical flow between them (OpenCV's DIS) inside the face;
3. the flow on the turn's axis is fitted, robustly (iteratively reweighted least
   squares), by every motion a simple surface can make (:func:`_design`: polynomials
   up to the fourth order in x and in y, which take in a plane seen in perspective
   and a cylinder or a fold about either axis, a print wrapped round a bottle among
   them) plus ``k`` times the depth of a mean human face (MediaPipe's canonical face
   mesh, :func:`depth_template`, shipped as ``face_depth.npy``);
4. ``k`` is how much of a face's relief the turn showed. Divided by the sine of the
   turn (the difference of the two head poses) it is about 0.2 to 1 for a real head
   and 0 for anything flat or simply curved: :func:`relief` returns that ratio,
   signed (negative: the surface moved against the turn).

What it cannot see: anything with a face's relief. A mask, a head-shaped print, a
video replay of the person's real head turns (its pixels hold the parallax of the
recorded head), and frames made by software from a 3-D model (injection, which
no server-side check of pixels can tell from a camera). See SECURITY.md.

Pure numpy and OpenCV; nothing here logs or keeps pixels beyond its arguments.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from importlib import resources

import cv2
import numpy as np

SIDE = 160  # the canonical square, pixels
# The face in the square: the distance from the eyes' midpoint to the mouth's is
# EYE_MOUTH of the side, and the midpoint of those two points sits CENTRE_Y below the
# square's centre.
EYE_MOUTH = 0.36
CENTRE_Y = 0.04
DEPTH_FILE = "face_depth.npy"
IRLS_STEPS = 4
HUBER = 1.5  # times the residuals' robust spread: beyond, a pixel's weight falls
STRIDE = 2  # every other pixel of the face in each direction enters the fit


@dataclass(frozen=True, eq=False)
class FaceView:
    """A face in the canonical square: its grey levels and where its five points fell."""

    crop: np.ndarray  # [SIDE, SIDE] uint8
    points: np.ndarray  # [5, 2] float64, canonical pixels


def canonical_transform(landmarks: np.ndarray) -> np.ndarray:
    """The 2x3 similarity taking image pixels into the canonical square: the eye line
    level, the eyes-to-mouth distance :data:`EYE_MOUTH` of the side."""
    points = np.asarray(landmarks, np.float64).reshape(5, 2)
    eyes, mouth = points[:2].mean(axis=0), points[3:].mean(axis=0)
    span = max(float(np.linalg.norm(mouth - eyes)), 1e-6)
    scale = EYE_MOUTH * SIDE / span
    line = points[1] - points[0]
    angle = -math.atan2(line[1], line[0])
    c, s = math.cos(angle) * scale, math.sin(angle) * scale
    linear = np.array([[c, -s], [s, c]])
    centre = (eyes + mouth) / 2
    shift = np.array([SIDE / 2, SIDE / 2 + CENTRE_Y * SIDE]) - linear @ centre
    return np.hstack([linear, shift[:, None]])


def face_view(pixels: np.ndarray, landmarks: np.ndarray) -> FaceView:
    """The canonical view of the face at ``landmarks`` (pixels of ``pixels``, RGB)."""
    matrix = canonical_transform(landmarks)
    crop = cv2.warpAffine(np.ascontiguousarray(pixels), matrix, (SIDE, SIDE),
                          flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    grey = cv2.cvtColor(crop, cv2.COLOR_RGB2GRAY) if crop.ndim == 3 else crop
    points = np.asarray(landmarks, np.float64).reshape(5, 2) @ matrix[:, :2].T + matrix[:, 2]
    return FaceView(np.ascontiguousarray(grey, dtype=np.uint8), points)


def depth_template(vertices: np.ndarray, triangles: np.ndarray,
                   five: np.ndarray) -> np.ndarray:
    """[SIDE, SIDE] float32: the depth of a mesh (x right, y up, z to the camera; its
    five points ``five`` in RetinaFace's order) in the canonical square, in canonical
    pixels, NaN outside the face. Each triangle rasterised with its plane's depth."""
    flat = np.stack([vertices[:, 0], -vertices[:, 1]], axis=1)  # image axes: y down
    matrix = canonical_transform(np.stack([five[:, 0], -five[:, 1]], axis=1))
    scale = math.hypot(matrix[0, 0], matrix[0, 1])
    points = flat @ matrix[:, :2].T + matrix[:, 2]
    depth = np.asarray(vertices[:, 2], np.float64) * scale
    out = np.full((SIDE, SIDE), -np.inf)
    for tri in triangles:
        _raster(out, points[tri], depth[tri])
    out[~np.isfinite(out)] = np.nan
    return out.astype(np.float32)


def _raster(out: np.ndarray, corners: np.ndarray, depth: np.ndarray) -> None:
    """Interpolated depth of one triangle into ``out`` (the nearest surface wins)."""
    low = np.maximum(np.floor(corners.min(axis=0)).astype(int), 0)
    high = np.minimum(np.ceil(corners.max(axis=0)).astype(int), SIDE - 1)
    if np.any(high < low):
        return
    ys, xs = np.mgrid[low[1]:high[1] + 1, low[0]:high[0] + 1]
    basis = np.array([corners[0] - corners[2], corners[1] - corners[2]]).T
    if abs(np.linalg.det(basis)) < 1e-9:
        return
    weights = np.linalg.solve(basis, np.stack([xs.ravel() - corners[2, 0],
                                               ys.ravel() - corners[2, 1]]))
    third = 1 - weights[0] - weights[1]
    inside = (weights[0] >= -1e-6) & (weights[1] >= -1e-6) & (third >= -1e-6)
    z = weights[0] * depth[0] + weights[1] * depth[1] + third * depth[2]
    rows, cols = ys.ravel()[inside], xs.ravel()[inside]
    out[rows, cols] = np.maximum(out[rows, cols], z[inside])


@functools.lru_cache(maxsize=1)
def shipped_depth() -> np.ndarray:
    """The depth template shipped with this package (``kyc models face-depth`` made it
    from the pinned canonical mesh; tests/unit/test_relief.py holds it to the mesh)."""
    with resources.files("kyc.liveness").joinpath(DEPTH_FILE).open("rb") as handle:
        depth = np.load(handle).astype(np.float32)
    if depth.shape != (SIDE, SIDE):
        raise ValueError(f"{DEPTH_FILE} is {depth.shape}, not ({SIDE}, {SIDE})")
    return depth


def _measurable(view: FaceView) -> bool:
    """The view's five points are finite and inside the square (landmarks of a face
    seen edge-on, or all at one point, make a view no flow can be read from)."""
    points = view.points
    return bool(np.isfinite(points).all() and (points >= 0).all() and (points < SIDE).all()
                and np.linalg.norm(points[1] - points[0]) >= 1.0)


def _face_mask(points: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """The inner face of a canonical view: an ellipse about the eyes and mouth, brow
    to chin and cheek to cheek, where the template has a depth."""
    eyes, mouth = points[:2].mean(axis=0), points[3:].mean(axis=0)
    span = float(np.linalg.norm(mouth - eyes))
    width = float(np.linalg.norm(points[1] - points[0]))
    centre = (eyes + mouth) / 2 - [0.0, 0.1 * span]
    mask = np.zeros((SIDE, SIDE), np.uint8)
    cv2.ellipse(mask, (round(centre[0]), round(centre[1])),
                (round(0.95 * width), round(1.25 * span)), 0, 0, 360, 1, -1)
    keep = np.zeros_like(mask, dtype=bool)
    keep[::STRIDE, ::STRIDE] = True
    return (mask > 0) & keep & np.isfinite(depth)


def _design(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """The motions of a simple surface: a plane in perspective and any surface curved
    about one axis, to the fourth order (columns; coordinates in sides from the centre)."""
    x, y = (xs - SIDE / 2) / SIDE, (ys - SIDE / 2) / SIDE
    return np.stack([np.ones_like(x), x, y, x * x, x * y, y * y, x ** 3, y ** 3,
                     x * x * y, x * y * y, x ** 4, y ** 4], axis=1)


def _robust_coefficients(design: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Huber-weighted least squares by iterated normal equations (13 columns: a few
    times faster than lstsq on the ~2,000 rows, and as exact at this conditioning)."""
    weights = np.ones_like(values)
    coef = np.zeros(design.shape[1])
    ridge = 1e-9 * np.eye(design.shape[1])
    for _ in range(IRLS_STEPS):
        weighted = design * weights[:, None]
        coef = np.linalg.solve(weighted.T @ design + ridge, weighted.T @ values)
        residual = np.abs(values - design @ coef)
        spread = 1.4826 * float(np.median(residual)) + 1e-6
        weights = np.clip(HUBER * spread / np.maximum(residual, 1e-9), 0.0, 1.0)
    return coef


def _flow() -> cv2.DISOpticalFlow:
    """OpenCV's DIS optical flow as measured best here (docs/eval/liveness.md): the
    MEDIUM preset with 8-pixel patches every 4 pixels down to half resolution. Against
    MEDIUM as it is, on real video and on prints, screens, curved prints and warps:
    real heads' median ratio 0.22 (0.20), the highest attack 0.04 (0.09)."""
    flow = cv2.DISOpticalFlow_create(cv2.DISOPTICAL_FLOW_PRESET_MEDIUM)
    flow.setFinestScale(1)
    flow.setPatchSize(8)
    flow.setPatchStride(4)
    return flow


def relief_coefficient(base: FaceView, turned: FaceView, axis: int,
                       depth: np.ndarray | None = None) -> float:
    """``k`` of the module docstring: the depth template's share of the flow from
    ``base`` to ``turned`` on ``axis`` (0: horizontal, a yaw; 1: vertical, a pitch)."""
    depth = shipped_depth() if depth is None else depth
    if not (_measurable(base) and _measurable(turned)):
        return math.nan
    to_base = np.linalg.lstsq(np.hstack([turned.points, np.ones((5, 1))]), base.points,
                              rcond=None)[0].T
    aligned = cv2.warpAffine(turned.crop, to_base, (SIDE, SIDE), flags=cv2.INTER_LINEAR,
                             borderMode=cv2.BORDER_REPLICATE)
    flow = _flow().calc(base.crop, aligned, None)
    ys, xs = np.nonzero(_face_mask(base.points, depth))
    if len(xs) < 50:
        return 0.0
    design = np.hstack([_design(xs.astype(np.float64), ys.astype(np.float64)),
                        depth[ys, xs].astype(np.float64)[:, None]])
    coef = _robust_coefficients(design, flow[ys, xs, axis].astype(np.float64))
    return float(coef[-1])


def relief(base: FaceView, turned: FaceView, axis: int, turn_deg: float,
           depth: np.ndarray | None = None) -> float:
    """The relief ratio of the module docstring for a turn of ``turn_deg`` degrees on
    ``axis`` (signed as head_pose reports it); 0 for a turn under one degree;
    NaN where a view cannot be read (the check then fails: it is never passed for
    want of a measure)."""
    if abs(turn_deg) < 1.0:
        return 0.0
    k = relief_coefficient(base, turned, axis, depth)
    # A yaw to the image's right moves the nose right (+x); a pitch up moves it up (-y).
    sign = math.copysign(1.0, turn_deg) * (1.0 if axis == 0 else -1.0)
    return sign * k / math.sin(math.radians(abs(turn_deg)))
