"""The face matchers measured against face_embedding (kyc_export.candidates): dlib's ResNet
exported to ONNX answers as dlib itself does, and a mirror-averaged model embeds a face
and its mirror image the same.

dlib's ResNet and its 5-point shape predictor come from the pinned
``face_recognition_models`` sdist (the real cache, downloaded with pip when missing);
dlib itself (``dlib-bin``) is the reference, installed by ``make test`` with the peers
(locks/peers.lock).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from kyc_export.candidates import mirror_average, write_candidates
from kyc_export.dlib_resnet import DESCRIPTOR_NAME, chip_to_crop, convert_dlib_resnet, outside_crop
from kyc_export.errors import ConversionError
from kyc_testing import SHIPPED_REPOSITORY
from kyc_tools.assets.fetch import fetch_candidate, fetch_test_photos

dlib = pytest.importorskip("dlib", reason="dlib-bin is installed by make test (peers)")

PARITY = 1e-4  # max |difference| of a descriptor (norms 1.3-1.5); measured: 3e-7


@pytest.fixture(scope="module")
def dlib_files() -> dict[str, Path]:
    return fetch_candidate("dlib_resnet")


@pytest.fixture(scope="module")
def chip_model(dlib_files) -> ort.InferenceSession:
    model = convert_dlib_resnet(dlib_files["model"].read_bytes(), chip_input=True)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def real_chips(files: dict[str, Path]) -> list[np.ndarray]:
    """dlib's own 150x150 chip of each real test photo: its detector, its 5 points."""
    import cv2

    detector = dlib.get_frontal_face_detector()
    predictor = dlib.shape_predictor(str(files["shape_predictor_5"]))
    chips = []
    for role, path in sorted(fetch_test_photos().items()):
        if role == "CREDITS":
            continue
        image = cv2.cvtColor(cv2.imread(str(path)), cv2.COLOR_BGR2RGB)
        faces = detector(image, 1)
        assert faces, f"dlib finds no face in {path.name}"
        face = max(faces, key=lambda r: r.area())
        chips.append(dlib.get_face_chip(image, predictor(image, face), size=150, padding=0.25))
    return chips


def test_the_onnx_export_of_dlibs_resnet_describes_each_chip_as_dlib_does(dlib_files,
                                                                         chip_model):
    reference = dlib.face_recognition_model_v1(str(dlib_files["model"]))
    noise = [np.random.default_rng(seed).integers(0, 256, (150, 150, 3), dtype=np.uint8)
             for seed in range(3)]
    chips = real_chips(dlib_files) + noise
    expected = np.array([reference.compute_face_descriptor(c) for c in chips])
    got = chip_model.run([DESCRIPTOR_NAME], {"FACE": np.stack(chips)})[0]
    assert np.abs(got - expected).max() < PARITY
    # and the faces' descriptors differ from each other far more than that
    assert np.abs(expected[0] - expected[1]).max() > 100 * PARITY


def test_the_served_crop_is_resampled_into_dlibs_chip_frame_without_rotation():
    scale, offset = chip_to_crop()
    assert 0.6 < scale < 0.8  # the chip's face is larger: eyes 53 px apart against 35
    outside = outside_crop(scale, offset)
    # only the chin's last rows fall below the 112 crop (edge-clamped), never the eyes
    assert outside["top"] == outside["left"] == outside["right"] == 0
    assert 0 < outside["bottom"] < 0.15


@pytest.mark.parametrize("damage", ["truncated", "trailing", "another_dlib_model"])
def test_a_file_that_is_not_the_pinned_network_is_refused(dlib_files, damage):
    data = dlib_files["model"].read_bytes()
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "trailing":
        data += b"\x01"
    else:
        data = dlib_files["shape_predictor_5"].read_bytes()
    with pytest.raises(ConversionError):
        convert_dlib_resnet(data)


def test_a_mirror_averaged_model_embeds_a_face_and_its_mirror_image_the_same():
    served = onnx.load(str(SHIPPED_REPOSITORY / "face_embedding" / "1" / "model.onnx"))
    plain, mirrored = _session(served), _session(mirror_average(served))
    faces = np.random.default_rng(0).integers(0, 256, (5, 112, 112, 3), dtype=np.uint8)
    flipped = faces[:, :, ::-1].copy()
    got = mirrored.run(None, {"FACE": faces})[0]
    both = plain.run(None, {"FACE": faces})[0] + plain.run(None, {"FACE": flipped})[0]
    assert np.abs(got - both / np.linalg.norm(both, axis=1, keepdims=True)).max() < 1e-5
    assert np.abs(got - mirrored.run(None, {"FACE": flipped})[0]).max() < 1e-6
    assert np.abs(got[:1] - mirrored.run(None, {"FACE": faces[:1]})[0]).max() < 1e-6


def test_each_candidate_keeps_the_served_contract(tmp_path):
    written = write_candidates(tmp_path, SHIPPED_REPOSITORY)
    assert set(written) == {"dlib-resnet", "dlib-resnet-mirror", "face_embedding-v1-mirror"}
    faces = np.random.default_rng(1).integers(0, 256, (3, 112, 112, 3), dtype=np.uint8)
    for path in written.values():
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        (embedding,) = session.run(["EMBEDDING"], {"FACE": faces})
        assert embedding.shape == (3, 128) and embedding.dtype == np.float32
        assert np.allclose(np.linalg.norm(embedding, axis=1), 1.0, atol=1e-5)
