"""kyc_intake: both images of a kyc_ensemble request checked before any other step runs.

``check_image`` must refuse exactly what ``decode_image`` refuses (the steps after
the intake decode again, and must never fail on a client image: docs/reliability.md),
the glue answers each request on its own, and the shipped configs keep the intake in
front of every step that reads a client image, with the strictest limits.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

import fake_triton
import hostile
from fake_triton import FakeError, FakeTensor
from kyc.image import ImageError, ImageLimits, check_image, decode_image
from kyc.intake import IMAGE_INPUTS, IntakeSettings, admission, check_images
from kyc.settings import from_parameters
from kyc_testing import SHIPPED_REPOSITORY
from kyc_tools.assets.fetch import fetch_test_photos
from kyc_tools.repo.config import load_config

FACE_LIMITS = ImageLimits(20 << 20, 40_000_000, 1600)
OCR_LIMITS = ImageLimits(20 << 20, 40_000_000, 2000)


@pytest.fixture(scope="module")
def photos() -> dict:
    return {k: p.read_bytes() for k, p in fetch_test_photos().items()}


@pytest.fixture(scope="module")
def broken(photos) -> list[tuple[str, bytes]]:
    """The hostile corpus's broken images, from a real photo, over four seeds."""
    rgb = np.asarray(Image.open(io.BytesIO(photos["person_a_1"])).convert("RGB"))
    return [(kind, data) for seed in range(4)
            for kind, data, _ in hostile.broken_images(rgb, np.random.default_rng(seed), 50)]


def refuses(function, data: bytes, limits: ImageLimits) -> bool:
    try:
        function(data, limits)
    except ImageError:
        return True
    return False


def test_check_image_refuses_exactly_what_the_later_decodes_refuse(broken, photos):
    refused = 0
    for kind, data in broken:
        face = refuses(decode_image, data, FACE_LIMITS)
        ocr = refuses(decode_image, data, OCR_LIMITS)
        checked = refuses(check_image, data, ImageLimits(20 << 20, 40_000_000, 0))
        assert checked == face == ocr, f"{kind}: check {checked}, face {face}, ocr {ocr}"
        refused += checked
    # the corpus is mostly bad, and some damaged JPEG/WebP still decode (a safe result)
    assert 0.5 * len(broken) < refused < len(broken)
    for name in ("person_a_1", "person_a_2"):
        assert check_image(photos[name], FACE_LIMITS)[0] == "JPEG"


def test_check_image_finds_a_truncated_jpeg_that_its_header_hides(photos):
    data = photos["person_a_2"]
    with pytest.raises(ImageError, match="cannot be decoded"):
        check_image(data[: len(data) // 2], FACE_LIMITS)


def test_check_images_names_the_first_bad_input(photos):
    good = photos["person_a_2"]
    assert check_images([("DOCUMENT_IMAGE", good), ("SELFIE_IMAGE", good)], FACE_LIMITS) is None
    problem = check_images([("DOCUMENT_IMAGE", good), ("SELFIE_IMAGE", b"junk")], FACE_LIMITS)
    assert problem == "SELFIE_IMAGE: the bytes are not a JPEG, PNG or WebP image"


@pytest.fixture
def model(monkeypatch, tmp_path):
    """kyc_intake as the stub loads it, its admission state in this test's own folder: in
    /dev/shm under the parent's pid, every test run of one parent (mutmut's workers, two
    runs in one process) would find the places an earlier run took and never gave back."""
    shm_path = admission.shm_path
    monkeypatch.setattr(admission, "shm_path",
                        lambda pid, entry: shm_path(pid, entry, tmp_path))
    fake_triton.install(monkeypatch)
    return fake_triton.served(SHIPPED_REPOSITORY, "kyc_intake")


def request(document: list[bytes], selfie: list[bytes]) -> dict:
    return {name: FakeTensor(name, np.array([[v] for v in values], dtype=np.object_))
            for name, values in zip(IMAGE_INPUTS, (document, selfie), strict=True)}


def test_good_images_pass_unchanged_and_each_bad_request_gets_its_own_error(model, photos):
    doc, selfie = photos["person_a_1"], photos["person_a_2"]
    responses = model.execute([request([doc], [selfie]), request([b""], [selfie]),
                               request([doc, doc], [selfie, b"GIF89a"]),
                               {"DOCUMENT_IMAGE": FakeTensor("DOCUMENT_IMAGE",
                                                             np.zeros((1, 1), np.float32))},
                               request([selfie, doc], [doc, selfie])])
    first, empty, second_row, wrong_type, two_rows = responses
    assert first.error() is None
    assert first.outputs()["CHECKED_DOCUMENT_IMAGE"].tolist() == [[doc]]
    assert first.outputs()["CHECKED_SELFIE_IMAGE"].tolist() == [[selfie]]
    assert empty.error().code == FakeError.INVALID_ARG
    assert empty.error().message() == "DOCUMENT_IMAGE: the image is empty (0 bytes)"
    assert second_row.error().message().startswith("row 1: SELFIE_IMAGE: ")
    assert wrong_type.error().code == FakeError.INVALID_ARG
    assert two_rows.error() is None
    assert two_rows.outputs()["CHECKED_DOCUMENT_IMAGE"].tolist() == [[selfie], [doc]]


def parameters(model: str) -> dict[str, str]:
    config = load_config(SHIPPED_REPOSITORY / model / "config.pbtxt")
    return {k: v.string_value for k, v in config.parameters.items()}


def test_the_client_image_limits_are_defined_once_by_the_intake_and_read_by_the_steps():
    intake = from_parameters(IntakeSettings, parameters("kyc_intake"))
    assert set(parameters("kyc_intake")) == {"max_image_bytes", "max_image_pixels",
                                            "max_pixels_per_byte", "admission"}
    for model in ("face_preprocess", "ocr_preprocess"):
        after = parameters(model)
        assert after["limits_model"] == "kyc_intake", model
        assert not {"max_image_bytes", "max_image_pixels", "max_pixels_per_byte"} & set(
            after), model
    # what the steps decode with is the intake's
    from kyc.document.step import OcrPreprocessStep
    from kyc.face.step import FacePreprocessStep
    from kyc.local import LocalRepository

    local = LocalRepository(SHIPPED_REPOSITORY)
    face = FacePreprocessStep.from_context(local.context("face_preprocess"))
    assert face.preprocessor.limits == intake.image_limits(
        face.preprocessor.settings.work_max_side)
    ocr = OcrPreprocessStep.from_context(local.context("ocr_preprocess"))
    assert ocr.client_limits == intake


def test_in_kyc_ensemble_only_the_intake_reads_the_client_images():
    config = load_config(SHIPPED_REPOSITORY / "kyc_ensemble" / "config.pbtxt")
    steps = list(config.ensemble_scheduling.step)
    assert steps[0].model_name == "kyc_intake"
    for step in steps[1:]:
        assert not set(step.input_map.values()) & set(IMAGE_INPUTS), step.model_name
    readers = {s.model_name for s in steps[1:]
               if {"checked_document_image", "checked_selfie_image"} & set(s.input_map.values())}
    assert readers == {"face_preprocess", "ocr_preprocess"}


def test_the_seal_binds_each_rows_token_and_the_requests_application(photos):
    """What kyc_decision checks against the token and application it receives."""
    import secrets

    from kyc.intake.step import IntakeStep
    from kyc.pipeline.seal import Sealer, application_digest, digest
    from kyc.pipeline.step import Request

    sealer = Sealer(secrets.token_bytes(32))
    step = IntakeStep(IntakeSettings(admission=False), sealer=sealer, clock=lambda: 1000.0)
    doc, selfie = photos["person_a_1"], photos["person_a_2"]
    images = {"DOCUMENT_IMAGE": np.array([[doc], [doc]], dtype=np.object_),
              "SELFIE_IMAGE": np.array([[selfie], [selfie]], dtype=np.object_)}
    tokens = np.array([[b"token-a"], [b""]], dtype=np.object_)
    answer, alone = step.run([Request({**images, "LIVENESS_TOKEN": tokens},
                                      parameters={"kyc_application": "app-1"}),
                              Request({"DOCUMENT_IMAGE": images["DOCUMENT_IMAGE"][:1]})])
    for row, token in enumerate((b"token-a", b"")):
        claims = sealer.open_seal(answer["SEAL"][row, 0].decode(), tuple(answer["ADMISSION"][row]),
                                  1000.0, 60.0)
        assert claims.token == digest(token) and claims.application == application_digest("app-1")
        assert (claims.document, claims.selfie) == (digest(doc), digest(selfie))
    claims = sealer.open_seal(alone["SEAL"][0, 0].decode(), tuple(alone["ADMISSION"][0]),
                              1000.0, 60.0)
    assert claims.token == claims.selfie == "-" and claims.application == application_digest(None)


def test_a_bad_application_or_token_tensor_is_refused_before_admission(photos):
    from kyc.intake.step import IntakeStep
    from kyc.pipeline.step import Request, RequestError

    admitted = []

    class Gate:
        def admit(self, now, rows):
            admitted.append(rows)
            raise AssertionError("no ticket may be taken")

    step = IntakeStep(IntakeSettings(), admission={"kyc_ensemble": Gate()})
    doc, selfie = photos["person_a_1"], photos["person_a_2"]
    images = {"DOCUMENT_IMAGE": np.array([[doc]], dtype=np.object_),
              "SELFIE_IMAGE": np.array([[selfie]], dtype=np.object_)}
    bad_application, two_tokens = step.run([
        Request({**images, "LIVENESS_TOKEN": np.array([[b""]], dtype=np.object_)},
                parameters={"kyc_application": "a\nb"}),
        Request({**images, "LIVENESS_TOKEN": np.array([[b""], [b""]], dtype=np.object_)})])
    assert isinstance(bad_application, RequestError) and "kyc_application" in str(bad_application)
    assert isinstance(two_tokens, RequestError) and "LIVENESS_TOKEN" in str(two_tokens)
    assert admitted == []
