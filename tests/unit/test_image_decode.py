"""Decoding client images: limits read from the header, EXIF orientation, clear errors."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from kyc.image import ImageError, ImageLimits, decode_image

LIMITS = ImageLimits(max_bytes=2_000_000, max_pixels=4_000_000, work_max_side=800)


def encode(array: np.ndarray, fmt: str = "PNG", **kwargs) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format=fmt, **kwargs)
    return buffer.getvalue()


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose IHDR claims width x height, with one tiny IDAT (a decompression bomb)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 16))
            + chunk(b"IEND", b""))


def marked_image(height: int = 60, width: int = 90) -> np.ndarray:
    """Grey image with a red block near the top-left corner (to follow orientation)."""
    image = np.full((height, width, 3), 128, np.uint8)
    image[5:15, 5:20] = (255, 0, 0)
    return image


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP"])
def test_png_jpeg_and_webp_decode_to_rgb_of_the_same_size(fmt):
    decoded = decode_image(encode(marked_image(), fmt, quality=95), LIMITS)
    assert decoded.pixels.shape == (60, 90, 3)
    assert decoded.pixels.dtype == np.uint8
    assert decoded.format == fmt
    assert decoded.input_size == (90, 60) and decoded.scale == 1.0
    red = decoded.pixels[10, 10]
    assert red[0] > 200 and red[1] < 60 and red[2] < 60


def test_grey_and_rgba_images_become_rgb():
    grey = decode_image(encode(np.full((20, 30), 77, np.uint8)), LIMITS)
    rgba = decode_image(encode(np.full((20, 30, 4), 77, np.uint8)), LIMITS)
    assert grey.pixels.shape == rgba.pixels.shape == (20, 30, 3)


@pytest.mark.parametrize(("orientation", "expected_corner"), [
    (1, (10, 12)),  # as stored: red block top-left
    (3, (49, 77)),  # rotated 180: bottom-right
    (6, (12, 49)),  # rotate 90 clockwise to display: top-right of a 60-wide image
    (8, (77, 10)),  # rotate 90 counter-clockwise to display: bottom-left
])
def test_exif_orientation_is_applied(orientation, expected_corner):
    image = Image.fromarray(marked_image())
    exif = Image.Exif()
    exif[0x0112] = orientation
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=95, exif=exif.tobytes())
    decoded = decode_image(buffer.getvalue(), LIMITS)
    if orientation in (6, 8):
        assert decoded.pixels.shape == (90, 60, 3)
        assert decoded.input_size == (60, 90)
    row, col = expected_corner
    assert decoded.pixels[row, col, 0] > 200 and decoded.pixels[row, col, 1] < 80


def test_a_large_jpeg_is_decoded_reduced_and_reports_the_scale_back_to_input_pixels():
    big = np.random.default_rng(0).integers(0, 255, (1200, 1800, 3), dtype=np.uint8)
    decoded = decode_image(encode(big, "JPEG"), LIMITS)
    assert max(decoded.pixels.shape[:2]) == 800
    assert decoded.input_size == (1800, 1200)
    assert decoded.scale == pytest.approx(1800 / decoded.pixels.shape[1])


def test_a_jpeg_decoded_at_half_size_just_over_the_limit_is_kept_as_decoded():
    from kyc.image import REDUCE_SLACK

    frame = np.random.default_rng(0).integers(0, 255, (900, 722, 3), dtype=np.uint8)
    limits = ImageLimits(max_bytes=2_000_000, max_pixels=4_000_000, work_max_side=448)
    decoded = decode_image(encode(frame, "JPEG"), limits)
    assert decoded.pixels.shape[:2] == (450, 361)  # DCT scaling by 1/2, no resize after
    assert 448 < 450 <= 448 * (1 + REDUCE_SLACK)
    assert decoded.scale == pytest.approx(2.0)


def test_garbage_bytes_are_refused_with_a_clear_message():
    with pytest.raises(ImageError, match="not a JPEG, PNG or WebP"):
        decode_image(b"this is not an image at all", LIMITS)


def test_empty_bytes_are_refused():
    with pytest.raises(ImageError, match="empty"):
        decode_image(b"", LIMITS)


def test_a_truncated_jpeg_is_refused_not_half_decoded():
    data = encode(np.random.default_rng(1).integers(0, 255, (200, 200, 3), np.uint8), "JPEG")
    with pytest.raises(ImageError, match="cannot be decoded"):
        decode_image(data[: len(data) // 2], LIMITS)


def test_too_many_bytes_are_refused_before_opening():
    with pytest.raises(ImageError, match="bytes, more than the limit"):
        decode_image(b"\xff" * (LIMITS.max_bytes + 1), LIMITS)


def test_a_png_header_claiming_100000x100000_pixels_is_refused_from_the_header():
    with pytest.raises(ImageError, match="pixels"):
        decode_image(png_header_only(100_000, 100_000), LIMITS)


def test_a_header_just_over_the_pixel_limit_is_refused_with_its_size():
    with pytest.raises(ImageError, match="2001x2000 pixels"):
        decode_image(png_header_only(2001, 2000), LIMITS)


def test_other_formats_are_refused_by_name():
    buffer = io.BytesIO()
    Image.fromarray(marked_image()).save(buffer, format="BMP")
    with pytest.raises(ImageError, match="BMP is not accepted"):
        decode_image(buffer.getvalue(), LIMITS)


# -- pixels per encoded byte: the attacker pays for the server's decoding --------------
PHOTO = ImageLimits(max_bytes=20 << 20, max_pixels=40_000_000, work_max_side=1600)


def refuse_decoding(monkeypatch):
    """Any pixel decoded fails the test: a refusal must come from the header."""
    from PIL import ImageFile

    def load(self):
        raise AssertionError("pixels were decoded")

    monkeypatch.setattr(ImageFile.ImageFile, "load", load)


def test_a_1_bit_png_of_6300x6300_pixels_in_5_kb_is_refused_on_its_header_as_a_bomb(
        monkeypatch):
    import hostile
    from kyc.image import check_image

    bomb = hostile.genuine_png_bomb(6300)
    assert len(bomb) < 5000 and PHOTO.max_pixels > 6300 * 6300  # under the pixel limit
    refuse_decoding(monkeypatch)
    for check in (decode_image, check_image):
        with pytest.raises(ImageError, match=r"39690000 pixels for \d+ bytes, more than 100 "
                                             r"pixels per byte"):
            check(bomb, PHOTO)


def test_an_image_of_at_most_1_mp_passes_however_well_it_compresses():
    black = encode(np.zeros((1000, 1000, 3), np.uint8))
    assert 1000 * 1000 / len(black) > 100
    assert decode_image(black, PHOTO).pixels.shape == (1000, 1000, 3)
    with pytest.raises(ImageError, match="pixels per byte"):
        decode_image(encode(np.zeros((1000, 1001, 3), np.uint8)), PHOTO)


def test_the_real_photos_pack_fewer_than_10_pixels_per_byte():
    from kyc_tools.assets.fetch import fetch_test_photos

    for role, path in fetch_test_photos().items():
        if path.suffix == ".jpg":
            data = path.read_bytes()
            width, height = Image.open(io.BytesIO(data)).size
            assert width * height / len(data) < 10, role


def test_a_real_camera_frame_of_4k_passes_as_a_liveness_frame_and_more_pixels_do_not():
    from kyc.intake import IntakeSettings
    from kyc.liveness.session import LivenessSettings
    from kyc_tools.assets.fetch import fetch_test_data
    from kyc_tools.dev.eval.liveness_samples import jpeg, read_clip

    frame = read_clip(fetch_test_data("face_videos")["woman_turning"])[20]
    uhd = np.asarray(Image.fromarray(frame).resize((3840, 2160), Image.Resampling.BICUBIC))
    limits = LivenessSettings().frame_limits(IntakeSettings().image_limits(448))
    assert limits.max_pixels == 3840 * 2160 < IntakeSettings().max_image_pixels
    decoded = decode_image(jpeg(uhd), limits)
    assert decoded.input_size == (3840, 2160) and max(decoded.pixels.shape) == 448
    with pytest.raises(ImageError, match="3841x2160 pixels, more than the limit of 8294400"):
        decode_image(png_header_only(3841, 2160), limits)
    decode_image(jpeg(np.asarray(Image.fromarray(uhd).resize((3841, 2160)))), PHOTO)
