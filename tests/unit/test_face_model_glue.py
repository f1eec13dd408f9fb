"""face_preprocess through the step adapter (kyc.pipeline.triton), with a fake pb_utils.

The BLS callee is the real face_detector ONNX run in-process; the served path is
tested against a real server in tests/integration/test_face_path.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import fake_triton
from fake_triton import FakeError, FakeResponse, FakeTensor
from kyc_testing import SHIPPED_REPOSITORY, require_weights
from kyc_tools.assets import fetch

CONFIG_PATH = SHIPPED_REPOSITORY / "face_preprocess" / "config.pbtxt"


@pytest.fixture
def pb(monkeypatch):
    import onnxruntime as ort

    require_weights()
    module = fake_triton.install(monkeypatch)
    session = ort.InferenceSession(str(SHIPPED_REPOSITORY / "face_detector" / "1" / "model.onnx"),
                                   providers=["CPUExecutionProvider"])

    def face_detector(inputs):
        outputs = session.run(["LOC", "SCORES", "LANDMARKS"], {"IMAGES": inputs["IMAGES"]})
        return FakeResponse([FakeTensor(n, a) for n, a in
                             zip(["LOC", "SCORES", "LANDMARKS"], outputs, strict=True)])

    module.models["face_detector"] = face_detector
    return module


def shipped_config() -> dict:
    from google.protobuf import json_format

    from kyc_tools.repo.config import load_config

    return json_format.MessageToDict(load_config(CONFIG_PATH), preserving_proto_field_name=True)


@pytest.fixture
def model(pb):
    return fake_triton.served(SHIPPED_REPOSITORY, "face_preprocess")


def image_request(*images: bytes) -> dict:
    return {"IMAGE": FakeTensor("IMAGE", np.array([[i] for i in images], dtype=np.object_))}


@pytest.fixture(scope="module")
def photo() -> bytes:
    return fetch.fetch_test_photos()["person_a_2"].read_bytes()


def test_one_execute_makes_one_bls_call_and_answers_every_request(model, pb, photo):
    responses = model.execute([image_request(photo), image_request(photo, photo),
                               image_request(b"junk")])
    assert len(pb.calls) == 1 and len(pb.calls[0].inputs[0].as_numpy()) == 3
    assert pb.calls[0].kwargs["preferred_memory"] == ("CPU", 0)
    first, second, third = (r.outputs() if r.error() is None else r for r in responses)
    assert first["FACE"].shape == (1, 112, 112, 3) and first["FACE_FOUND"].tolist() == [[True]]
    assert second["FACE"].shape == (2, 112, 112, 3)
    np.testing.assert_array_equal(first["FACE"][0], second["FACE"][1])
    assert third.error().code == FakeError.INVALID_ARG
    assert third.error().message().startswith("IMAGE: the bytes are not a JPEG")


def test_a_bad_image_inside_a_multi_image_request_names_its_index(model, photo):
    (response,) = model.execute([image_request(photo, b"")])
    assert response.error().message() == "IMAGE[1]: the image is empty (0 bytes)"


def test_a_wrong_input_type_is_refused_per_request(model, photo):
    bad = {"IMAGE": FakeTensor("IMAGE", np.zeros((1, 1), np.float32))}
    responses = model.execute([bad, image_request(photo)])
    assert responses[0].error().code == FakeError.INVALID_ARG
    assert "TYPE_STRING" in responses[0].error().message()
    assert responses[1].error() is None


def test_a_failing_detector_answers_the_batch_with_internal_errors_and_does_not_raise(
        model, pb, photo):
    pb.models["face_detector"] = lambda inputs: FakeResponse(error=FakeError("out of memory"))
    responses = model.execute([image_request(photo), image_request(photo)])
    assert [r.error().code for r in responses] == [FakeError.INTERNAL] * 2
    assert "face_detector failed: out of memory" in responses[0].error().message()


def test_the_shipped_config_sets_every_setting_explicitly():
    from dataclasses import fields

    from kyc.face.preprocess import FaceSettings

    parameters = set(shipped_config().get("parameters", {}))
    assert parameters == {f.name for f in fields(FaceSettings)}


def test_an_unexpected_failure_on_one_image_answers_only_its_request_with_internal(
        model, photo, monkeypatch):
    from kyc.face import preprocess

    real = preprocess.warp_face
    calls = []

    def flaky(image, landmarks, *args):
        calls.append(1)
        if len(calls) == 2:
            raise FloatingPointError("simulated")
        return real(image, landmarks, *args)

    monkeypatch.setattr(preprocess, "warp_face", flaky)
    responses = model.execute([image_request(photo), image_request(photo), image_request(photo)])
    assert [r.error() is None for r in responses] == [True, False, True]
    assert responses[1].error().code == FakeError.INTERNAL
    assert "FloatingPointError" in responses[1].error().message()


def test_nothing_raises_out_of_execute(model, photo, monkeypatch):
    def broken(images):
        raise MemoryError

    monkeypatch.setattr(model.step.preprocessor, "run", broken)
    responses = model.execute([image_request(photo), image_request(photo)])
    assert [r.error().code for r in responses] == [FakeError.INTERNAL] * 2
