"""Face alignment: a least-squares similarity transform onto the ArcFace template, then a warp."""

from __future__ import annotations

import numpy as np
from PIL import Image

FACE_SIZE = 112
# The standard 5-point template of 112x112 ArcFace crops: eye centres (left, right
# as seen in the image), nose tip, mouth corners (left, right).
ARCFACE_TEMPLATE = np.array(
    [[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366], [41.5493, 92.3655],
     [70.7299, 92.2041]],
    dtype=np.float64,
)
ARCFACE_TEMPLATE.setflags(write=False)


def umeyama(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The 3x3 similarity (rotation, uniform scale, translation) mapping ``src`` onto ``dst``.

    Least squares in closed form (Umeyama 1991), reflections excluded.
    """
    # Ours, not cv2.estimateAffinePartial2D(src, dst, method=cv2.LMEDS) (InsightFace's
    # other choice), measured (.venv/bin/python tests/unit/test_face_library_parity.py):
    # LMEDS is a robust fit that drops landmarks it takes for outliers (128 of 1000
    # template sets with 2-px noise lost some, their transforms up to 32 off this one);
    # keeping all five (the real photos) its Levenberg-Marquardt refinement still stops
    # up to 1.6e-5 short of this least-squares solution. It is faster (12 vs 38 us a
    # face), which is nothing beside the detector.
    src = np.asarray(src, dtype=np.float64)
    dst = np.asarray(dst, dtype=np.float64)
    if src.shape != dst.shape or src.ndim != 2 or src.shape[0] < 2:
        raise ValueError(f"need matching point sets of at least 2 points, got {src.shape}, "
                         f"{dst.shape}")
    dim = src.shape[1]
    src_mean, dst_mean = src.mean(axis=0), dst.mean(axis=0)
    src_c, dst_c = src - src_mean, dst - dst_mean
    covariance = dst_c.T @ src_c / len(src)
    u, singular, vt = np.linalg.svd(covariance)
    sign = np.ones(dim)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:
        sign[-1] = -1
    rotation = u @ np.diag(sign) @ vt
    variance = (src_c**2).sum() / len(src)
    scale = float((singular * sign).sum() / variance) if variance > 0 else 1.0
    transform = np.eye(dim + 1)
    transform[:dim, :dim] = scale * rotation
    transform[:dim, dim] = dst_mean - scale * rotation @ src_mean
    return transform


def warp_face(image: np.ndarray, landmarks: np.ndarray, size: int = FACE_SIZE) -> np.ndarray:
    """The ``size`` x ``size`` RGB crop of ``image`` with ``landmarks`` on the template."""
    # Pillow, not cv2.warpAffine(INTER_LINEAR), measured on the real test photos
    # (.venv/bin/python tests/unit/test_face_library_parity.py): the same geometry, but
    # the crops differ by up to 3 levels in half of the values (OpenCV samples on a
    # 1/32-pixel grid: up to 3.4 levels off an exact float64 bilinear; Pillow truncates,
    # less than 1 below it), which moves SFace similarities by up to 0.004, and the
    # match threshold and the scores quoted in face_embedding's config were taken on
    # these crops. cv2 is faster (51 vs 450-890 us a face: Pillow copies the image in).
    template = ARCFACE_TEMPLATE * (size / FACE_SIZE)
    forward = umeyama(landmarks, template)
    inverse = np.linalg.inv(forward)  # Pillow maps output pixels back to input pixels
    # Pillow samples pixel centres at +0.5; the transform is in the same pixel
    # coordinates as the landmarks, so shift into and out of centre coordinates.
    shift = np.array([[1, 0, 0.5], [0, 1, 0.5], [0, 0, 1]])
    unshift = np.array([[1, 0, -0.5], [0, 1, -0.5], [0, 0, 1]])
    coeffs = (shift @ inverse @ unshift)[:2].ravel().tolist()
    warped = Image.fromarray(image).transform(
        (size, size), Image.Transform.AFFINE, coeffs, Image.Resampling.BILINEAR
    )
    return np.asarray(warped)


def apply(transform: np.ndarray, points: np.ndarray) -> np.ndarray:
    """``points`` [..., 2] mapped by a 3x3 affine ``transform``."""
    return points @ transform[:2, :2].T + transform[:2, 2]


def template_error(landmarks: np.ndarray) -> float:
    """Largest distance (pixels of the 112-pixel crop) of aligned landmarks from the template.

    Small for a face seen upright (real photos measured up to about 6); large when
    the detector's landmarks are not a face's (a face lying on its side).
    """
    points = np.asarray(landmarks, dtype=np.float64)
    aligned = apply(umeyama(points, ARCFACE_TEMPLATE), points)
    return float(np.linalg.norm(aligned - ARCFACE_TEMPLATE, axis=1).max())
