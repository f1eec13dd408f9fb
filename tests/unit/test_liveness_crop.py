"""kyc.liveness.crop.context_crop: the MiniFASNet context crop on synthetic frames.

The frames encode each pixel's position (red = x, green = y), so a crop shows which
window of the frame it came from. The expected windows are worked out by hand from
the reference's CropImage arithmetic (Silent-Face-Anti-Spoofing,
src/generate_patches.py), in the comments next to each case.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from kyc.liveness.crop import context_crop, crop_window


def position_frame(height: int, width: int) -> np.ndarray:
    """RGB uint8: red = x, green = y (both < 256 here), blue = a fixed texture."""
    ys, xs = np.mgrid[0:height, 0:width]
    blue = (xs * 7 + ys * 13) % 251 + 1
    frame = np.stack([xs, ys, blue], axis=-1)
    assert frame.max() < 256
    return frame.astype(np.uint8)


def assert_crop_is_window(frame: np.ndarray, box, scale: float,
                          window: tuple[int, int, int, int]) -> np.ndarray:
    """Asserts that the crop of ``box`` at ``scale`` is ``window`` of the frame (x1, y1,
    x2, y2, right and bottom included) resized to 80 x 80, and that crop_window says
    that window; returns the crop."""
    x1, y1, x2, y2 = window
    crop = context_crop(frame, box, scale=scale)

    assert crop_window(frame.shape[:2], box, scale) == window
    np.testing.assert_array_equal(crop, cv2.resize(frame[y1:y2 + 1, x1:x2 + 1], (80, 80)))
    return crop


def test_a_centred_box_at_scale_1_whose_window_is_the_output_size_is_copied_pixel_for_pixel():
    frame = position_frame(200, 200)
    # w = h = int(138 - 60 + 1) = 79, centre 99.5: window 60..139, both included: 80 px
    crop = context_crop(frame, (60.0, 60.0, 138.0, 138.0), scale=1.0, size=80)

    assert crop.shape == (80, 80, 3) and crop.dtype == np.uint8
    np.testing.assert_array_equal(crop, frame[60:140, 60:140])
    assert tuple(crop[0, 0, :2]) == (60, 60) and tuple(crop[-1, -1, :2]) == (139, 139)


@pytest.mark.parametrize(
    ("frame_size", "box", "scale", "window"),
    [
        # w = 100, h = 120: window x 50..150, y 40..160 (right and bottom included)
        pytest.param((240, 200), (50, 40, 149, 159), 1.0, (50, 40, 150, 160),
                     id="a_centred_box_at_scale_1_gives_the_box_content_resized"),
        # int(60.7) = 60, w = int(138.2 - 60.7 + 1) = int(78.5) = 78: window 60..138
        pytest.param((200, 200), np.array([60.7, 60.7, 138.2, 138.2], dtype=np.float32), 1.0,
                     (60, 60, 138, 138),
                     id="a_box_given_as_an_array_with_fractional_corners_is_truncated_as_the_"
                        "reference"),
        # w = h = 40, centre (100, 100), x2.7 -> 108: 46..154 both ways
        pytest.param((200, 200), (80, 80, 119, 119), 2.7, (46, 46, 154, 154),
                     id="scale_enlarges_the_window_around_the_box_centre"),
        # w = h = 40: scale min(4, 119/40, 159/40) = 2.975 -> 119 px; centre (30, 60):
        # x -29.5 -> 0..119, y 0.5..119.5 -> moved up to 0..119: the frame's left square
        pytest.param((120, 160), (10, 40, 49, 79), 4.0, (0, 0, 119, 119),
                     id="a_scale_the_frame_cannot_hold_is_capped_by_the_frame_size"),
        # x = int(-20.5) = -20 (int() truncates towards zero), w = int(29.5 + 20.5 + 1) = 51,
        # h = 51, centre (5.5, 55.5); x1.5 -> 76.5: x -32.75..43.75 -> moved right to
        # 0..76.5; y 17.25..93.75; truncated: x 0..76, y 17..93
        pytest.param((120, 160), (-20.5, 30.0, 29.5, 80.0), 1.5, (0, 17, 76, 93),
                     id="a_box_partly_outside_the_frame_gives_a_window_inside_it"),
    ],
)
def test_the_crop_is_the_window_worked_out_from_the_reference_resized(
        frame_size, box, scale, window):
    assert_crop_is_window(position_frame(*frame_size), box, scale, window)


def test_a_large_scale_near_the_left_edge_shifts_the_window_inside_without_padding():
    frame = position_frame(120, 160)
    # w = h = 40, centre (30, 60); x2.7 -> 108 wide: left -24 -> moved to 0..108;
    # top 6, bottom 114 fit. The box centre is now 30 px from the left of a 108 px
    # window, not in its middle.
    box = (10, 40, 49, 79)

    crop = assert_crop_is_window(frame, box, 2.7, (0, 6, 108, 114))
    assert crop[:, 0, 0].max() == 0  # the first column is the frame's first column
    centre_column = int(np.argmin(np.abs(crop[40, :, 0].astype(int) - 30)))
    assert centre_column < 30  # off-centre: about 80 * 30 / 109 = 22


def test_a_large_scale_near_the_bottom_right_corner_shifts_the_window_up_and_left():
    frame = position_frame(120, 160)
    # w = h = 20, centre (140, 100); x2.7 -> 54: x 113..167 -> moved left by 8 to
    # 105..159; y 73..127 -> moved up by 8 to 65..119 (the reference stops at size - 1)
    box = (130, 90, 149, 109)

    crop = assert_crop_is_window(frame, box, 2.7, (105, 65, 159, 119))
    assert crop[-1, -1, 0] == 159 and crop[-1, -1, 1] == 119


@pytest.mark.parametrize("size", [80, 112, 48])
def test_output_shape_dtype_and_a_fresh_contiguous_array(size):
    frame = position_frame(150, 130)

    crop = context_crop(frame, (30, 30, 90, 100), scale=2.7, size=size)

    assert crop.shape == (size, size, 3) and crop.dtype == np.uint8
    assert crop.flags["C_CONTIGUOUS"] and not np.shares_memory(crop, frame)


def test_the_crop_does_not_mix_channels_so_bgr_and_rgb_give_mirrored_channels():
    frame = position_frame(150, 130)
    box = (30, 30, 90, 100)

    rgb = context_crop(frame, box, scale=2.7)
    bgr = context_crop(np.ascontiguousarray(frame[..., ::-1]), box, scale=2.7)

    np.testing.assert_array_equal(bgr, rgb[..., ::-1])


@pytest.mark.parametrize(
    ("image", "box", "scale", "message"),
    [
        (np.zeros((50, 50, 3), np.float32), (1, 1, 20, 20), 2.7, "uint8"),
        (np.zeros((50, 50), np.uint8), (1, 1, 20, 20), 2.7, r"\[H, W, 3\]"),
        (np.zeros((50, 50, 3), np.uint8), (20, 20, 10, 30), 2.7, "empty"),
        (np.zeros((50, 50, 3), np.uint8), (1, 1, 20), 2.7, "4 finite numbers"),
        (np.zeros((50, 50, 3), np.uint8), (1, 1, 20, float("nan")), 2.7, "4 finite"),
        (np.zeros((50, 50, 3), np.uint8), (1, 1, 20, 20), 0.0, "positive"),
    ],
)
def test_bad_arguments_are_refused_with_a_clear_message(image, box, scale, message):
    with pytest.raises(ValueError, match=message):
        context_crop(image, box, scale)
