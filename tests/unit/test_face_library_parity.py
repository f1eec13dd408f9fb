"""OpenCV against our own code in the face path: the facts behind each choice.

NMS is ``cv2.dnn.NMSBoxes`` (:func:`kyc.face.retinaface.nms`): held here to textbook
greedy NMS (exact IoU without a +1 pixel, a box dropped above the threshold, best score
first, ties in input order) on real detector outputs and clustered synthetic boxes. The
similarity transform and the warp stay ours (:mod:`kyc.face.align`): the tests pin
where OpenCV's candidates differ.

Run as a script for the measurements (parity and timings, medians of many runs):
``.venv/bin/python tests/unit/test_face_library_parity.py``
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kyc.face.align import ARCFACE_TEMPLATE, FACE_SIZE, umeyama, warp_face
from kyc.face.preprocess import FacePreprocessor, FaceSettings
from kyc.face.retinaface import decode, detect_batch, nms, priors
from kyc.image import decode_image, letterbox
from kyc_testing import PROJECT_ROOT, SHIPPED_REPOSITORY, require_weights
from kyc_tools.assets import fetch

CANVAS, SCORE, IOU = 640, 0.7, 0.4  # model_repository/face_preprocess/config.pbtxt
NUMPY_NMS_AT = "1867dcc"  # the last commit with the numpy NMS (script: timing column)


# -- oracles ----------------------------------------------------------------------------
def greedy_nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float) -> list[int]:
    """Textbook greedy NMS in float64, one box at a time: the behaviour nms must keep."""
    b = np.asarray(boxes, np.float64)
    keep: list[int] = []
    for i in np.argsort(-np.asarray(scores), kind="stable"):
        w = np.clip(np.minimum(b[i, 2], b[keep, 2]) - np.maximum(b[i, 0], b[keep, 0]), 0, None)
        h = np.clip(np.minimum(b[i, 3], b[keep, 3]) - np.maximum(b[i, 1], b[keep, 1]), 0, None)
        area = (b[i, 2] - b[i, 0]) * (b[i, 3] - b[i, 1])
        kept_area = (b[keep, 2] - b[keep, 0]) * (b[keep, 3] - b[keep, 1])
        if not np.any(w * h / (area + kept_area - w * h) > iou_threshold):
            keep.append(int(i))
    return keep


def similarity_lstsq(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The least-squares similarity x' = a x - b y + tx, y' = b x + a y + ty (2x3)."""
    x, y = src[:, 0], src[:, 1]
    one, zero = np.ones_like(x), np.zeros_like(x)
    rows = np.concatenate([np.stack([x, -y, one, zero], 1), np.stack([y, x, zero, one], 1)])
    (a, b, tx, ty), *_ = np.linalg.lstsq(rows, np.concatenate([dst[:, 0], dst[:, 1]]),
                                         rcond=None)
    return np.array([[a, -b, tx], [b, a, ty]])


def exact_bilinear(image: np.ndarray, forward: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 112x112 crop sampled in float64 (pixel centres at integers, as cv2 and
    warp_face take them) and where all four neighbours lie inside the image."""
    inverse = np.linalg.inv(np.vstack([forward[:2], [0, 0, 1]]))
    yy, xx = np.mgrid[0:FACE_SIZE, 0:FACE_SIZE].astype(np.float64)
    sx = inverse[0, 0] * xx + inverse[0, 1] * yy + inverse[0, 2]
    sy = inverse[1, 0] * xx + inverse[1, 1] * yy + inverse[1, 2]
    h, w = image.shape[:2]
    x0, y0 = np.floor(sx).astype(int), np.floor(sy).astype(int)
    inside = (x0 >= 0) & (y0 >= 0) & (x0 + 1 < w) & (y0 + 1 < h)
    x0, y0 = np.clip(x0, 0, w - 2), np.clip(y0, 0, h - 2)
    fx, fy = (sx - x0)[..., None], (sy - y0)[..., None]
    px = image.astype(np.float64)
    crop = (px[y0, x0] * (1 - fx) * (1 - fy) + px[y0, x0 + 1] * fx * (1 - fy)
            + px[y0 + 1, x0] * (1 - fx) * fy + px[y0 + 1, x0 + 1] * fx * fy)
    return crop, inside


def cv2_warp(image: np.ndarray, forward: np.ndarray) -> np.ndarray:
    return cv2.warpAffine(image, forward[:2], (FACE_SIZE, FACE_SIZE), flags=cv2.INTER_LINEAR,
                          borderMode=cv2.BORDER_CONSTANT, borderValue=0)


def lmeds(src: np.ndarray) -> tuple[np.ndarray, int]:
    """InsightFace's alternative: a robust fit onto the template (2x3, inliers)."""
    matrix, inliers = cv2.estimateAffinePartial2D(src, ARCFACE_TEMPLATE, method=cv2.LMEDS)
    return matrix, int(inliers.sum())


def clustered_boxes(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` float32 boxes in clusters of ~25 around a few faces, scores above 0.7
    (every third set rounded to 2 decimals: ties)."""
    centres = rng.uniform(50, 590, (max(1, count // 25), 2))
    pick = rng.integers(0, len(centres), count)
    middle = centres[pick] + rng.normal(0, 6, (count, 2))
    size = rng.uniform(20, 120, (len(centres), 1))[pick] * rng.uniform(0.8, 1.25, (count, 2))
    scores = rng.uniform(0.7, 1.0, count).astype(np.float32)
    if rng.integers(3) == 0:
        scores = np.round(scores, 2)
    return np.concatenate([middle - size / 2, middle + size / 2], 1).astype(np.float32), scores


# -- the real detector's outputs ------------------------------------------------------------
def real_outputs() -> dict:
    """The shipped face_detector on the test photos in all 4 quarter turns (640 canvas):
    raw outputs, and each upright photo's pixels with its best face's landmarks."""
    import onnxruntime as ort

    require_weights()
    session = ort.InferenceSession(str(SHIPPED_REPOSITORY / "face_detector" / "1" / "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    limits = FacePreprocessor(FaceSettings(), detector=None).limits
    pixels = [decode_image(p.read_bytes(), limits).pixels
              for k, p in fetch.fetch_test_photos().items() if k != "CREDITS"]
    boxed = [letterbox(np.rot90(px, turns), CANVAS) for px in pixels for turns in range(4)]
    loc, scores, marks = session.run(["LOC", "SCORES", "LANDMARKS"],
                                     {"IMAGES": np.stack([canvas for canvas, _ in boxed])})
    found = detect_batch(loc, scores, marks, CANVAS, CANVAS, SCORE, IOU)
    faces = [(px, boxed[4 * i][1].to_image(found[4 * i].landmarks[0]).astype(np.float64))
             for i, px in enumerate(pixels)]
    return {"loc": loc, "scores": scores, "marks": marks, "faces": faces}


def candidates(real: dict, n: int, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """Decoded boxes and scores of canvas ``n`` above ``threshold`` (at most 500)."""
    index = np.flatnonzero(real["scores"][n] > threshold)
    index = index[np.argsort(-real["scores"][n, index], kind="stable")[:500]]
    boxes, _ = decode(real["loc"][n, index], real["marks"][n, index], priors(CANVAS, CANVAS)[index])
    return boxes, real["scores"][n, index]


@pytest.fixture(scope="module")
def real() -> dict:
    return real_outputs()


# -- NMS: OpenCV's, held to greedy NMS -----------------------------------------------------
@pytest.mark.parametrize("threshold", [SCORE, 0.02])
def test_nms_keeps_the_greedy_picks_in_order_on_real_detector_outputs(real, threshold):
    for n in range(len(real["scores"])):
        boxes, scores = candidates(real, n, threshold)
        assert nms(boxes, scores, IOU).tolist() == greedy_nms(boxes, scores, IOU), n


def test_nms_keeps_the_greedy_picks_in_order_on_clustered_boxes():
    rng = np.random.default_rng(0)
    for count in (20, 100, 500):
        for _ in range(10):
            boxes, scores = clustered_boxes(rng, count)
            assert nms(boxes, scores, IOU).tolist() == greedy_nms(boxes, scores, IOU)


def test_nms_iou_has_no_extra_pixel_and_drops_only_above_the_threshold():
    scores = np.array([0.9, 0.8], np.float32)
    # IoU 1/7 = 0.14 (with a +1 pixel convention 4/14 = 0.29)
    assert nms(np.array([[0, 0, 2, 2], [1, 1, 3, 3]], np.float32), scores, 0.2).tolist() == [0, 1]
    # IoU exactly 0.4 (with +1: 55/121 = 0.45) is not above 0.4
    exact = np.array([[0, 0, 10, 10], [0, 0, 10, 4]], np.float32)
    assert nms(exact, scores, 0.4).tolist() == [0, 1]
    assert nms(exact, scores, 0.39).tolist() == [0]


def test_nms_keeps_equal_scores_in_input_order_and_takes_empty_input():
    boxes = np.array([[50, 50, 60, 60], [0, 0, 10, 10], [1, 1, 11, 11]], np.float32)
    assert nms(boxes, np.full(3, 0.8, np.float32), 0.4).tolist() == [0, 1]
    assert nms(boxes, np.array([0.7, 0.8, 0.9], np.float32), 0.4).tolist() == [2, 0]
    assert nms(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), 0.4).tolist() == []


# -- alignment: ours kept, where OpenCV differs ------------------------------------------------
def test_umeyama_is_the_least_squares_similarity_of_all_five_landmarks(real):
    for _, landmarks in real["faces"]:
        ours = umeyama(landmarks, ARCFACE_TEMPLATE)
        np.testing.assert_allclose(ours[:2], similarity_lstsq(landmarks, ARCFACE_TEMPLATE),
                                   atol=1e-9)
        # cv2's robust fit, keeping all five here, refines to the same transform only
        # approximately (Levenberg-Marquardt; measured 1.6e-5 off)
        matrix, inliers = lmeds(landmarks)
        assert inliers == 5
        np.testing.assert_allclose(matrix, ours[:2], atol=1e-3)


def test_lmeds_drops_a_landmark_that_umeyama_weighs_with_the_others():
    landmarks = ARCFACE_TEMPLATE * 2.0 + [40.0, 30.0]
    landmarks[3] += [0.0, 12.0]  # one mouth corner 12 px off, as on a smiling face
    ours = umeyama(landmarks, ARCFACE_TEMPLATE)
    np.testing.assert_allclose(ours[:2], similarity_lstsq(landmarks, ARCFACE_TEMPLATE), atol=1e-9)
    matrix, inliers = lmeds(landmarks)
    assert inliers < 5 and np.abs(matrix - ours[:2]).max() > 0.1


def test_warp_face_is_within_one_level_of_exact_bilinear_sampling(real):
    for image, landmarks in real["faces"]:
        forward = umeyama(landmarks, ARCFACE_TEMPLATE)
        exact, inside = exact_bilinear(image, forward)
        ours = warp_face(image, landmarks).astype(np.float64)
        assert np.abs(ours - exact)[inside].max() <= 1.0
        # cv2.warpAffine: the same geometry, but on a 1/32-pixel grid (measured up to
        # 3.4 levels off exact, up to 3 from ours)
        assert np.abs(cv2_warp(image, forward) - ours).max() <= 4


# -- the measurements (script) -------------------------------------------------------------
def median_us(call, runs: int) -> float:
    call()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return float(np.median(times) * 1e6)


def numpy_nms():
    """The numpy NMS nms replaced (from git, for the timing column), or None."""
    try:
        source = subprocess.run(
            ["git", "show", f"{NUMPY_NMS_AT}:backends/kyc/face/retinaface.py"], check=True,
            cwd=PROJECT_ROOT, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    namespace: dict = {"__name__": "numpy_nms"}
    exec(compile(source, f"retinaface.py@{NUMPY_NMS_AT}", "exec"), namespace)
    return namespace["nms"]


def measure_alignment(image: np.ndarray, landmarks: np.ndarray) -> tuple[np.ndarray, ...]:
    """Prints one face's figures; returns its crops (warp_face, cv2.warpAffine)."""
    forward = umeyama(landmarks, ARCFACE_TEMPLATE)
    matrix, inliers = lmeds(landmarks)
    exact, inside = exact_bilinear(image, forward)
    ours, theirs = warp_face(image, landmarks), cv2_warp(image, forward)
    diff = np.abs(ours.astype(int) - theirs)
    timings = {
        "umeyama": median_us(lambda: umeyama(landmarks, ARCFACE_TEMPLATE), 500),
        "lmeds": median_us(lambda: lmeds(landmarks), 500),
        "warp_face": median_us(lambda: warp_face(image, landmarks), 100),
        "cv2.warpAffine": median_us(lambda: cv2_warp(image, forward), 100),
    }
    print(f"{image.shape[1]}x{image.shape[0]}: |M_lmeds - M| "
          f"{np.abs(matrix - forward[:2]).max():.1e} ({inliers} inliers); crops differ by up to"
          f" {diff.max()} in {100 * np.mean(diff > 0):.0f}% of values; off exact bilinear:"
          f" pillow {np.abs(ours - exact)[inside].max():.2f}, cv2"
          f" {np.abs(theirs - exact)[inside].max():.2f}; us: "
          + ", ".join(f"{k} {v:.0f}" for k, v in timings.items()))
    return ours, theirs


def measure() -> None:
    import onnxruntime as ort

    real, old, rng = real_outputs(), numpy_nms(), np.random.default_rng(0)
    print(f"NMS at IoU {IOU}: cv2.dnn.NMSBoxes (nms) vs greedy float64 and numpy @{NUMPY_NMS_AT}")
    print(f"{'set':26} {'sets':>4} {'=greedy':>7} {'=numpy':>6} {'K':>4} {'numpy us':>8} "
          f"{'cv2 us':>7}")
    sets = {f"real {CANVAS} score>{t}": [candidates(real, n, t) for n in range(24)]
            for t in (SCORE, 0.02)}
    sets.update({f"clustered K={k}": [clustered_boxes(rng, k) for _ in range(100)]
                 for k in (20, 100, 500)})
    for name, pairs in sets.items():
        ours = [nms(b, s, IOU).tolist() for b, s in pairs]
        same = sum(o == greedy_nms(b, s, IOU) for o, (b, s) in zip(ours, pairs, strict=True))
        same_old = sum(o == old(b, s, IOU).tolist() for o, (b, s) in
                       zip(ours, pairs, strict=True)) if old else -1
        timed = pairs[:12]
        t_old = np.median([median_us(lambda b=b, s=s: old(b, s, IOU), 200)
                           for b, s in timed]) if old else float("nan")
        t_cv = np.median([median_us(lambda b=b, s=s: nms(b, s, IOU), 200) for b, s in timed])
        k = int(np.median([len(s) for _, s in pairs]))
        print(f"{name:26} {len(pairs):4} {same:7} {same_old:6} {k:4} {t_old:8.1f} {t_cv:7.1f}")

    print("\nAlignment on the real photos' landmarks (umeyama + Pillow = warp_face)")
    embedder = ort.InferenceSession(
        str(SHIPPED_REPOSITORY / "face_embedding" / "1" / "model.onnx"),
        providers=["CPUExecutionProvider"])
    crops = [measure_alignment(image, landmarks) for image, landmarks in real["faces"]]
    pil, cv = (np.stack([embedder.run(None, {"FACE": c[k][None]})[0][0] for c in crops])
               for k in (0, 1))
    print(f"SFace embeddings of pillow and cv2 crops: cosine >= {np.min(np.sum(pil * cv, 1)):.5f};"
          f" pairwise similarities move by up to {np.abs(pil @ pil.T - cv @ cv.T).max():.4f}")
    turns = rng.uniform(-0.5, 0.5, 1000)
    noisy = [ARCFACE_TEMPLATE @ (rng.uniform(0.8, 3.0) * np.array(
        [[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])).T + rng.uniform(20, 200, 2)
        + rng.normal(0, 2, (5, 2)) for a in turns]
    fits = [(lmeds(p), umeyama(p, ARCFACE_TEMPLATE)[:2]) for p in noisy]
    off = np.array([np.abs(m - ours).max() for (m, _), ours in fits])
    print(f"1000 template sets with 2-px noise: LMEDS dropped landmarks in "
          f"{sum(n < 5 for (_, n), _ in fits)}, off umeyama by up to {off.max():.1f}; "
          f"off > 1e-6 in {np.sum(off > 1e-6)}")


if __name__ == "__main__":
    measure()
