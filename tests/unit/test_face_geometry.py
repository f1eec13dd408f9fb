"""Priors, decoding, NMS, letterboxing, quarter turns, face choice and alignment."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kyc.face.align import ARCFACE_TEMPLATE, apply, umeyama, warp_face
from kyc.face.geometry import choose_face, unrotate_box, unrotate_points
from kyc.face.retinaface import VARIANCES, decode, detect_batch, nms, priors
from kyc.image import letterbox


# -- priors and decoding -------------------------------------------------------------
def test_priors_follow_retinaface_strides_and_sizes_in_output_order():
    table = priors(64, 96)
    # 8x12 cells x 2 + 4x6 x 2 + 2x3 x 2
    assert table.shape == (8 * 12 * 2 + 4 * 6 * 2 + 2 * 3 * 2, 4)
    np.testing.assert_array_equal(table[0], [4, 4, 16, 16])
    np.testing.assert_array_equal(table[1], [4, 4, 32, 32])
    np.testing.assert_array_equal(table[2], [12, 4, 16, 16])  # x moves fastest
    np.testing.assert_array_equal(table[8 * 12 * 2], [8, 8, 64, 64])
    np.testing.assert_array_equal(table[-1], [80, 48, 512, 512])


def test_priors_of_sizes_that_do_not_divide_by_the_stride_round_up():
    assert len(priors(33, 33)) == (5 * 5 + 3 * 3 + 2 * 2) * 2


def encode(box, points, anchor):
    """The inverse of decode: deltas that make ``anchor`` decode to ``box``/``points``."""
    centre, size = anchor[:2], anchor[2:]
    box = np.asarray(box, np.float64)
    loc = np.concatenate([((box[:2] + box[2:]) / 2 - centre) / (VARIANCES[0] * size),
                          np.log((box[2:] - box[:2]) / size) / VARIANCES[1]])
    marks = ((np.asarray(points, np.float64) - centre) / (VARIANCES[0] * size)).ravel()
    return loc, marks


def test_decode_inverts_the_encoding_of_boxes_and_landmarks():
    anchor = np.array([100.0, 80.0, 64.0, 64.0])
    box = [70.0, 50.0, 140.0, 130.0]
    points = ARCFACE_TEMPLATE * 0.6 + 50
    loc, marks = encode(box, points, anchor)
    boxes, landmarks = decode(loc[None], marks[None], anchor[None])
    np.testing.assert_allclose(boxes[0], box, atol=1e-9)
    np.testing.assert_allclose(landmarks[0], points, atol=1e-9)


def test_nms_keeps_the_best_of_overlapping_boxes_and_separate_ones():
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60], [0, 0, 10, 9.5]],
                     np.float64)
    scores = np.array([0.8, 0.9, 0.7, 0.6])
    assert nms(boxes, scores, 0.4).tolist() == [1, 2]
    assert sorted(nms(boxes, scores, 0.99).tolist()) == [0, 1, 2, 3]


def synthetic_outputs(batch_faces, size=64):
    """Detector outputs for [N, size, size] canvases with the given faces per image."""
    anchors = priors(size, size).astype(np.float64)
    n = len(batch_faces)
    loc = np.zeros((n, len(anchors), 4), np.float32)
    scores = np.zeros((n, len(anchors)), np.float32)
    marks = np.zeros((n, len(anchors), 10), np.float32)
    for i, faces in enumerate(batch_faces):
        for box, score in faces:
            centre = (np.array(box[:2]) + box[2:]) / 2
            k = int(np.argmin(np.linalg.norm(anchors[:, :2] - centre, axis=1)
                              + np.abs(anchors[:, 2] - (box[2] - box[0]))))
            width, height = box[2] - box[0], box[3] - box[1]
            fractions = np.array([[0.3, 0.4], [0.7, 0.4], [0.5, 0.5], [0.35, 0.8], [0.65, 0.8]])
            points = np.array(box[:2]) + fractions * np.array([width, height])
            loc[i, k], marks[i, k] = encode(box, points, anchors[k])
            scores[i, k] = score
    return loc, scores, marks


def test_detect_batch_decodes_every_image_of_the_batch_separately():
    loc, scores, marks = synthetic_outputs([
        [((10, 10, 30, 34), 0.99)],
        [],
        [((5, 5, 20, 20), 0.95), ((35, 30, 60, 62), 0.9), ((36, 30, 60, 61), 0.8)],
    ])
    found = detect_batch(loc, scores, marks, 64, 64, score_threshold=0.5, iou_threshold=0.4)
    assert [len(d) for d in found] == [1, 0, 2]
    np.testing.assert_allclose(found[0].boxes[0], [10, 10, 30, 34], atol=1e-3)
    assert found[2].scores.tolist() == pytest.approx([0.95, 0.9])
    assert found[0].landmarks.shape == (1, 5, 2)


def test_detect_batch_refuses_outputs_that_do_not_match_the_priors():
    with pytest.raises(ValueError, match="priors"):
        detect_batch(np.zeros((1, 10, 4)), np.zeros((1, 10)), np.zeros((1, 10, 10)), 64, 64,
                     0.5, 0.4)


# -- letterbox and quarter turns ----------------------------------------------------------
def test_letterbox_scales_to_fit_at_the_top_left_and_maps_back():
    image = np.full((100, 200, 3), 200, np.uint8)
    canvas, box = letterbox(image, 64)
    assert canvas.shape == (64, 64, 3)
    assert canvas[:32, :64].min() > 150 and canvas[33:].max() == 0
    np.testing.assert_allclose(box.to_image(np.array([[32.0, 16.0]])), [[100.0, 50.0]])
    np.testing.assert_allclose(box.to_image(np.array([0.0, 0.0, 64.0, 32.0])), [0, 0, 200, 100])


@pytest.mark.parametrize("shape,expected", [((100, 200), (96, 128)), ((200, 100), (128, 96)),
                                            ((120, 128), (128, 128)), ((10, 200), (64, 128))])
def test_a_page_shaped_canvas_rounds_the_shorter_side_and_a_margin_up_to_its_step(shape,
                                                                                    expected):
    image = np.full((*shape, 3), 200, np.uint8)
    canvas, box = letterbox(image, 128, short_step=32)
    assert canvas.shape == (*expected, 3)
    # the same scale as the square canvas: only the padding is gone
    square, same = letterbox(image, 128)
    assert (box.scale_x, box.scale_y) == (same.scale_x, same.scale_y)
    np.testing.assert_array_equal(canvas, square[: expected[0], : expected[1]])


@pytest.mark.parametrize("turns", [0, 1, 2, 3])
def test_points_found_in_a_turned_image_map_back_to_the_original(turns):
    image = np.zeros((5, 7), np.uint8)
    image[1, 4] = 1
    row, col = np.argwhere(np.rot90(image, turns))[0]
    np.testing.assert_allclose(unrotate_points(np.array([col, row]), turns, image.shape), [4, 1])


def test_a_box_found_in_a_turned_image_maps_to_a_box_of_the_original():
    box = unrotate_box(np.array([1.0, 2.0, 3.0, 6.0]), 1, (10, 20))
    # A counter-clockwise turn of a 20-wide image: (x, y) turned <- (19 - y, x) original.
    np.testing.assert_allclose(box, [13, 1, 17, 3])


# -- face choice ------------------------------------------------------------------------
def test_the_largest_face_is_chosen():
    boxes = np.array([[10, 10, 30, 30], [40, 40, 100, 100]], np.float64)
    assert choose_face(boxes, (200, 200), min_size=5) == 1


def test_of_two_equal_faces_the_central_one_is_chosen():
    boxes = np.array([[0, 0, 40, 40], [80, 80, 120, 120]], np.float64)
    assert choose_face(boxes, (200, 200), min_size=5) == 1


def test_faces_below_the_minimum_size_are_ignored():
    boxes = np.array([[0, 0, 8, 8]], np.float64)
    assert choose_face(boxes, (200, 200), min_size=10) is None
    assert choose_face(np.zeros((0, 4)), (200, 200), min_size=10) is None


# -- alignment --------------------------------------------------------------------------
def test_umeyama_recovers_a_known_similarity_exactly():
    angle, scale, shift = math.radians(25), 2.5, np.array([30.0, -12.0])
    rotation = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    src = ARCFACE_TEMPLATE.copy()
    dst = src @ (scale * rotation).T + shift
    transform = umeyama(src, dst)
    np.testing.assert_allclose(transform[:2, :2], scale * rotation, atol=1e-9)
    np.testing.assert_allclose(transform[:2, 2], shift, atol=1e-9)
    np.testing.assert_allclose(apply(transform, src), dst, atol=1e-9)


def test_umeyama_never_returns_a_reflection():
    mirrored = ARCFACE_TEMPLATE * np.array([-1.0, 1.0])
    transform = umeyama(ARCFACE_TEMPLATE, mirrored)
    assert np.linalg.det(transform[:2, :2]) > 0


def test_warp_puts_the_landmarks_on_the_template():
    # Draw five dots at known places of a larger image, warp, find the dots again.
    rng = np.random.default_rng(3)
    angle, scale = math.radians(-15), 2.2
    rotation = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    points = ARCFACE_TEMPLATE @ (scale * rotation).T + np.array([60.0, 90.0])
    image = (rng.integers(0, 20, (400, 400, 3))).astype(np.uint8)
    for x, y in points:
        image[round(y) - 2: round(y) + 3, round(x) - 2: round(x) + 3] = 255
    face = warp_face(image, points)
    assert face.shape == (112, 112, 3)
    for x, y in ARCFACE_TEMPLATE:
        patch = face[round(y) - 1: round(y) + 2, round(x) - 1: round(x) + 2, 0]
        assert patch.max() > 200, (x, y)
