"""The hostile-input corpus: big enough, every class present, broken as it says."""

from __future__ import annotations

import struct
from collections import Counter

import numpy as np
import pytest

import hostile
from kyc.image import ImageError, ImageLimits, decode_image

LIMITS = {"face_preprocess": 1000, "document_ocr": 1000, "kyc_ensemble": 1000,
          "liveness_sequence": 500}
PIXELS = ImageLimits(max_bytes=1 << 30, max_pixels=40_000_000, work_max_side=1600)


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    rng = np.random.default_rng(1)
    return (rng.random((120, 160, 3)) * 255).astype(np.uint8)


@pytest.fixture(scope="module")
def cases(photo):
    return hostile.corpus(photo, b"filler", b"document", b"selfie", LIMITS)


def test_at_least_500_requests_over_the_four_client_facing_models(cases):
    assert hostile.requests(cases) >= 500
    assert {c.model for c in cases} == {"kyc_ensemble", "document_ocr", "face_preprocess",
                                        "liveness_sequence"}


def test_every_hostile_class_of_the_issue_is_present(cases):
    kinds = Counter(c.kind for c in cases)
    for kind in ("random_bytes", "truncated_jpeg", "truncated_png", "truncated_webp",
                 "corrupt_jpeg", "corrupt_png", "corrupt_webp", "decompression_bomb",
                 "zero_length", "oversized", "wrong_dtype", "wrong_shape", "wrong_batch",
                 "non_utf8_token", "huge_token", "sequence_no_start", "sequence_end_twice",
                 "sequence_unknown_id_end"):
        assert kinds[kind] > 0, kind


def test_the_corpus_is_the_same_for_a_seed_and_differs_for_another(photo, cases):
    def flat(case_list):
        return [(c.kind, c.model, [t.array.tobytes() if t.datatype != "BYTES"
                                   else b"".join(t.array.ravel()) for s in c.steps
                                   for t in s.inputs]) for c in case_list]

    assert flat(cases) == flat(hostile.corpus(photo, b"filler", b"document", b"selfie", LIMITS))
    other = hostile.corpus(photo, b"filler", b"document", b"selfie", LIMITS, seed=1)
    assert flat(cases) != flat(other)


def test_bombs_declare_more_pixels_than_the_limit_while_staying_small(photo):
    enc = hostile.encodings(photo)
    bombs = [hostile.png_claiming(enc["PNG"], 60000, 60000),
             hostile.jpeg_claiming(enc["JPEG"], 60000, 60000),
             hostile.webp_claiming(enc["WEBP"], 0x3FFF, 0x3FFF),
             hostile.genuine_png_bomb()]
    for bomb in bombs:
        assert len(bomb) < 200_000
        with pytest.raises(ImageError, match="more pixels than the limit"):
            decode_image(bomb, PIXELS)
    assert struct.unpack(">II", bombs[0][16:24]) == (60000, 60000)  # the IHDR says so


def test_truncated_images_fail_to_decode_and_the_originals_decode(photo):
    for fmt, data in hostile.encodings(photo).items():
        assert decode_image(data, PIXELS).pixels.shape == photo.shape
        for fraction in (0.1, 0.5, 0.9):
            with pytest.raises(ImageError):
                decode_image(hostile.truncated(data, fraction), PIXELS)
        assert fmt in ("JPEG", "PNG", "WEBP")


def test_oversized_payloads_are_one_byte_over_the_models_limit(cases):
    for case in (c for c in cases if c.kind == "oversized"):
        sizes = [len(t.array.ravel()[0]) for s in case.steps for t in s.inputs
                 if t.datatype == "BYTES" and len(t.array.ravel()[0]) > 100]
        assert sizes == [LIMITS[case.model] + 1]
