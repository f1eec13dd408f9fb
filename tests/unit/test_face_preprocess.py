"""FacePreprocessor with the real RetinaFace model run in-process on real photos.

The served path (BLS through a real server) is in tests/integration/test_face_path.py;
these tests pin the logic: one detector call per batch, rotations, errors per image.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from PIL import Image

from kyc.face.align import template_error
from kyc.face.preprocess import FacePreprocessor, FaceSettings, result_tensors
from kyc.image import ImageError
from kyc.settings import SettingsError, from_parameters
from kyc_testing import SHIPPED_REPOSITORY, require_weights
from kyc_tools.assets import fetch


class CountingDetector:
    """The shipped face_detector ONNX in onnxruntime, counting calls and batch sizes."""

    def __init__(self) -> None:
        import onnxruntime as ort

        require_weights()
        self.session = ort.InferenceSession(
            str(SHIPPED_REPOSITORY / "face_detector" / "1" / "model.onnx"),
            providers=["CPUExecutionProvider"])
        self.batches: list[int] = []
        self.sides: list[int] = []

    def __call__(self, batch: np.ndarray):
        self.batches.append(len(batch))
        self.sides.append(batch.shape[1])
        return tuple(self.session.run(["LOC", "SCORES", "LANDMARKS"], {"IMAGES": batch}))


@pytest.fixture(scope="module")
def detector() -> CountingDetector:
    return CountingDetector()


@pytest.fixture
def preprocessor(detector) -> FacePreprocessor:
    detector.batches.clear()
    return FacePreprocessor(FaceSettings(detector_size=480), detector)


@pytest.fixture(scope="module")
def photos() -> dict[str, bytes]:
    return {k: p.read_bytes() for k, p in fetch.fetch_test_photos().items() if k != "CREDITS"}


def jpeg(image: Image.Image, **kwargs) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", **kwargs)
    return buffer.getvalue()


def test_every_real_photo_gives_one_face_in_one_detector_call(preprocessor, detector, photos):
    results = preprocessor.run(list(photos.values()))
    assert detector.batches == [len(photos)]
    for name, result in zip(photos, results, strict=True):
        assert result.found and result.faces == 1 and result.rotation == 0, name
        assert result.score > 0.95, name
        x1, y1, x2, y2 = result.box
        assert np.all((result.landmarks >= [x1, y1]) & (result.landmarks <= [x2, y2])), name
        assert result.face.shape == (112, 112, 3) and result.face.std() > 20, name
        # eyes, nose and mouth land on the template within a few pixels
        assert template_error(result.landmarks) < 8, name


def test_small_images_are_not_blown_up_to_the_full_canvas(detector, photos):
    small = photos["person_a_1"]  # 204 x 244 pixels
    detector.sides.clear()
    preprocessor = FacePreprocessor(FaceSettings(), detector)
    (alone,) = preprocessor.run([small])
    assert alone.found and detector.sides == [256]
    preprocessor.run([small, photos["person_a_2"]])
    assert detector.sides[-1] == 640  # the batch takes the canvas of its largest image


@pytest.mark.parametrize("turns", [1, 2, 3])
def test_a_photo_turned_in_pixels_is_found_by_the_rotation_retry(preprocessor, detector, photos,
                                                                   turns):
    upright = preprocessor.run([photos["person_b_1"]])[0]
    image = Image.open(io.BytesIO(photos["person_b_1"])).rotate(90 * turns, expand=True)
    detector.batches.clear()
    turned = preprocessor.run([jpeg(image, quality=95)])[0]
    assert detector.batches == [1, 3]  # upright, then the three other turns in one call
    assert turned.found and turned.rotation == (360 - 90 * turns) % 360
    # The aligned face is upright again: the same crop as from the upright photo.
    difference = np.abs(turned.face.astype(float) - upright.face.astype(float)).mean()
    assert difference < 4, difference


def test_upside_down_photos_are_turned_back_though_the_detector_likes_them_upright(
        detector, photos):
    # At the shipped canvas size RetinaFace reads upside-down faces as upright ones
    # with plausible-looking landmarks (scores 0.97-0.99); the retry must win.
    upside_down = [jpeg(Image.open(io.BytesIO(d)).rotate(180), quality=95)
                   for d in photos.values()]
    results = FacePreprocessor(FaceSettings(), detector).run(upside_down)
    assert [r.rotation for r in results] == [180] * len(photos)
    assert all(r.template_error < 9 for r in results)


def test_a_face_lying_on_its_side_is_not_taken_upright_even_if_the_detector_scores_it(
        detector, photos):
    # RetinaFace scores sideways faces highly, with landmarks in the wrong places.
    image = Image.open(io.BytesIO(photos["impostor_2"])).rotate(180)
    settings = FaceSettings(detector_size=480, try_rotations=False)
    upright_only = FacePreprocessor(settings, detector).run([jpeg(image, quality=95)])[0]
    assert upright_only.found and not upright_only.plausible
    assert upright_only.template_error > 12


def test_no_face_gives_found_false_and_a_zero_face_not_an_error(preprocessor):
    rng = np.random.default_rng(0)
    noise = Image.fromarray(rng.integers(0, 255, (300, 400, 3), dtype=np.uint8))
    result = preprocessor.run([jpeg(noise)])[0]
    assert not result.found and result.faces == 0
    assert result.face.shape == (112, 112, 3) and result.face.max() == 0
    assert result.quality is None


def test_a_bad_image_gets_its_own_error_and_the_others_are_answered(preprocessor, detector,
                                                                    photos):
    good = photos["impostor_1"]
    results = preprocessor.run([good, b"garbage", good[: len(good) // 3], good])
    assert isinstance(results[1], ImageError) and "not a JPEG" in str(results[1])
    assert isinstance(results[2], ImageError) and "cannot be decoded" in str(results[2])
    assert results[0].found and results[3].found
    assert detector.batches == [2]  # only decodable images reach the detector


def test_result_tensors_have_the_contract_shapes_and_types(preprocessor, photos):
    results = preprocessor.run([photos["person_a_1"], photos["person_a_2"]])
    tensors = result_tensors(results)
    assert tensors["FACE"].shape == (2, 112, 112, 3) and tensors["FACE"].dtype == np.uint8
    assert tensors["FACE_FOUND"].shape == (2, 1) and tensors["FACE_FOUND"].dtype == np.bool_
    assert tensors["BOX"].shape == (2, 4) and tensors["LANDMARKS"].shape == (2, 5, 2)
    assert tensors["DET_SCORE"].shape == (2, 1) and tensors["NUM_FACES"].dtype == np.int32
    report = json.loads(tensors["QUALITY"][1, 0])
    assert report["face_found"] and report["faces"] == 1
    assert {"sharpness", "brightness", "yaw", "pitch", "roll", "face_width"} <= set(report)


def test_settings_come_from_config_parameters_and_typos_are_refused():
    settings = from_parameters(FaceSettings, {"score_threshold": "0.5", "try_rotations": "false",
                                              "EXECUTION_ENV_PATH": "/x"})
    assert settings.score_threshold == 0.5 and settings.try_rotations is False
    with pytest.raises(SettingsError, match="unknown parameter"):
        from_parameters(FaceSettings, {"score_treshold": "0.5"})
    with pytest.raises(SettingsError, match="detector_size"):
        from_parameters(FaceSettings, {"detector_size": "big"})
