"""DB postprocess, crops, reading order, recogniser batching and CTC decoding."""

from __future__ import annotations

import numpy as np
import pytest

from kyc.document.db import DBSettings, order_points, text_boxes
from kyc.document.lines import (
    PAD_VALUE,
    REC_HEIGHT,
    band_line,
    class_mask,
    crop_line,
    ctc_greedy,
    plan_batches,
    reading_order,
)


def prob_map_with(*rects, shape=(200, 300), value=0.9) -> np.ndarray:
    prob = np.zeros(shape, np.float32)
    for x0, y0, x1, y1 in rects:
        prob[y0:y1, x0:x1] = value
    return prob


# -- DB postprocess --------------------------------------------------------------------
def test_each_text_region_gives_one_box_grown_back_by_the_unclip_ratio():
    prob = prob_map_with((20, 30, 120, 46), (150, 100, 280, 120))
    boxes = sorted(text_boxes(prob, DBSettings()), key=lambda b: b.points[0, 1])
    assert len(boxes) == 2
    first = boxes[0].points
    # The shrunk region (100 x 16) is grown on every side by area*1.5/perimeter = 10.3.
    assert first[0, 0] == pytest.approx(20 - 10.3, abs=1.5)
    assert first[2, 1] == pytest.approx(46 + 10.3, abs=1.5)
    assert boxes[0].score == pytest.approx(0.9, abs=0.01)


def test_weak_and_tiny_regions_are_dropped():
    weak = prob_map_with((20, 30, 120, 46), value=0.5)  # above thresh, below box_thresh
    tiny = prob_map_with((20, 30, 22, 32))
    assert text_boxes(weak, DBSettings()) == []
    assert text_boxes(tiny, DBSettings()) == []
    assert text_boxes(np.zeros((64, 64), np.float32), DBSettings()) == []


def test_boxes_stay_inside_the_map():
    boxes = text_boxes(prob_map_with((0, 0, 100, 20)), DBSettings())
    assert boxes and boxes[0].points.min() >= 0


def test_corners_are_ordered_clockwise_from_top_left():
    shuffled = np.array([[10, 20], [0, 0], [10, 0], [0, 20]], np.float32)
    np.testing.assert_array_equal(order_points(shuffled), [[0, 0], [10, 0], [10, 20], [0, 20]])


# -- crops and reading order -----------------------------------------------------------
def test_a_crop_is_the_box_warped_upright():
    image = np.zeros((100, 200, 3), np.uint8)
    image[40:60, 50:150] = 255
    crop = crop_line(image, np.array([[50, 40], [150, 40], [150, 60], [50, 60]], np.float32))
    assert crop.shape[:2] == (20, 100)
    assert crop[2:-2, 2:-2].min() > 200


def test_a_tall_crop_is_turned_to_read_left_to_right():
    image = np.zeros((200, 100, 3), np.uint8)
    crop = crop_line(image, np.array([[40, 20], [60, 20], [60, 180], [40, 180]], np.float32))
    assert crop.shape[:2] == (20, 160)


def box(x, y, w=50, h=20):
    return np.array([[x, y], [x + w, y], [x + w, y + h], [x, y + h]], np.float32)


def test_reading_order_is_by_line_then_left_to_right():
    boxes = [box(200, 103), box(10, 100), box(10, 10), box(120, 12, h=18), box(10, 200)]
    assert reading_order(boxes) == [2, 3, 1, 0, 4]
    assert reading_order([]) == []


# -- MRZ lines found in pieces ------------------------------------------------------------
WHOLE = box(100, 300, w=700, h=20)  # an MRZ line found whole


def test_an_mrz_line_cut_in_pieces_beside_a_whole_one_runs_along_its_span():
    pieces = [box(102, 262, w=300, h=19), box(600, 263, w=150, h=18)]
    line = band_line(WHOLE, pieces)
    np.testing.assert_allclose(line[:, 0], [100, 800, 800, 100], atol=1e-3)
    np.testing.assert_allclose(line[:, 1], [262, 262, 281, 281], atol=1e-3)  # the pieces' extent


def test_the_end_of_an_mrz_line_found_alone_is_read_along_the_whole_span():
    line = band_line(WHOLE, [box(690, 340, w=112, h=20)])  # only fillers at the end
    np.testing.assert_allclose(line[:, 0], [100, 800, 800, 100], atol=1e-3)


def test_a_turned_page_keeps_the_line_parallel_to_the_whole_one():
    turn = np.deg2rad(5)
    rotate = np.array([[np.cos(turn), -np.sin(turn)], [np.sin(turn), np.cos(turn)]])
    whole = WHOLE @ rotate.T
    pieces = [box(100, 262, w=300, h=20) @ rotate.T]
    line = band_line(whole, pieces)
    np.testing.assert_allclose(line @ rotate, box(100, 262, w=700, h=20), atol=1e-3)


@pytest.mark.parametrize("pieces,why", [
    ([box(330, 262, w=200, h=20)], "starts and ends elsewhere: a visual-zone row"),
    ([box(100, 200, w=300, h=20)], "too far from the line"),
    ([box(100, 300, w=300, h=20)], "on the line itself"),
    ([box(100, 255, w=300, h=40)], "twice the line's height"),
])
def test_rows_that_are_not_beside_a_whole_line_are_not_mrz_lines(pieces, why):
    assert band_line(WHOLE, pieces) is None, why


# -- recogniser batching ---------------------------------------------------------------
def test_crops_of_one_padded_width_share_a_call_and_each_is_padded_to_its_own_bucket():
    # height 24 -> 48: widths double (200, 800, 220, 840, 210)
    crops = [np.full((24, w, 3), 10, np.uint8) for w in (100, 400, 110, 420, 105)]
    batches = plan_batches(crops, max_batch=64, width_step=64)
    assert [sorted(b.indices) for b in batches] == [[0, 2, 4], [1], [3]]
    assert [b.images.shape[2] for b in batches] == [256, 832, 896]
    for batch in batches:
        assert batch.images.shape[1] == REC_HEIGHT
        for row, width in enumerate(batch.widths):
            assert batch.images.shape[2] - width < 64
            assert (batch.images[row, :, width:] == PAD_VALUE).all()


def test_a_crops_padded_row_is_the_same_whatever_crops_share_its_call():
    rng = np.random.default_rng(3)
    crops = [rng.integers(0, 255, (30, w, 3), dtype=np.uint8) for w in (90, 300, 95, 610, 88)]

    def row_of(index, batches):
        batch = next(b for b in batches if index in b.indices)
        return batch.images[batch.indices.index(index)]

    together = plan_batches(crops, max_batch=8)
    for i, crop in enumerate(crops):
        np.testing.assert_array_equal(row_of(i, together), row_of(0, plan_batches([crop], 8)))


def test_the_width_step_keeps_the_recognisers_stride():
    with pytest.raises(ValueError, match="width_step must be a multiple of 8"):
        plan_batches([np.zeros((24, 100, 3), np.uint8)], max_batch=8, width_step=60)


def test_batches_respect_the_recogniser_batch_size():
    crops = [np.zeros((24, 100, 3), np.uint8)] * 10
    assert [len(b.indices) for b in plan_batches(crops, max_batch=4)] == [4, 4, 2]


# -- CTC --------------------------------------------------------------------------------
ALPHABET = ["A", "B", "0", "O", "<"]


def one_hot(classes: list[int], confidence: float = 0.9) -> np.ndarray:
    probs = np.full((len(classes), len(ALPHABET) + 1), (1 - confidence) / len(ALPHABET))
    probs[np.arange(len(classes)), classes] = confidence
    return probs


def test_ctc_greedy_collapses_repeats_and_drops_blanks():
    text, confidence = ctc_greedy(one_hot([1, 1, 0, 1, 2, 0, 0, 5, 5]), ALPHABET)
    assert text == "AAB<" and confidence == pytest.approx(0.9)
    assert ctc_greedy(one_hot([0, 0]), ALPHABET) == ("", 1.0)


def test_a_restricted_reading_takes_the_best_allowed_class():
    probs = one_hot([4])  # "O" wins...
    probs[0, 3] = 0.05  # ... "0" is second
    assert ctc_greedy(probs, ALPHABET)[0] == "O"
    assert ctc_greedy(probs, ALPHABET, class_mask(ALPHABET, "AB0<"))[0] == "0"


def test_two_long_lines_of_a_turned_page_are_two_rows_in_order():
    """Two 44-character lines, 60 px apart, turned 6 degrees: each box spans 150 px
    vertically, but the lines are 45 px thick and stay two rows, top one first."""
    angle = np.radians(6)
    turn = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])

    def turned(y):
        return (box(0, y, w=1100, h=45) - [550, 0]) @ turn.T + [650, 0]

    first, second = turned(800), turned(860)
    assert np.ptp(first[:, 1]) > 150 and second[:, 0].min() < first[:, 0].min()
    assert reading_order([second, first]) == [1, 0]
