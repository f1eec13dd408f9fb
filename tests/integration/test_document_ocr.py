"""document_ocr through the real server, on rendered documents (DejaVu visual zone, OCR-B MRZ).

Documents are generated at test time from seeded random identities, with the real
test photos in the photo area, and photographed with moderate degradations
(blur, noise, JPEG, rotation, perspective, uneven light).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from kyc_client.liveness import bytes_input
from kyc_testing import concurrently_as_a_client
from kyc_tools.assets import fetch
from kyc_tools.dev.synthetic.document import (
    LAYOUTS,
    Degradation,
    alter_mrz_digit,
    random_identity,
    render_document,
)
from kyc_tools.operator.server import is_ready

pytestmark = pytest.mark.integration

DOCUMENTS = 30
CHECKS = ("document_number", "birth_date", "expiry_date", "optional_data", "composite")


def read_all(server, images: list[bytes]) -> list:
    """document_ocr on every image, sent concurrently in groups (so requests batch); a
    request shed by admission control (a busy machine) is sent again, as a client does."""
    results = []
    for start in range(0, len(images), 8):
        group = images[start: start + 8]
        results += concurrently_as_a_client(server.options.grpc_url, "document_ocr",
                                            [[bytes_input("IMAGE", i)] for i in group])
    return results


def outputs(result) -> tuple[list, dict]:
    assert not isinstance(result, Exception), result
    lines = json.loads(result.as_numpy("TEXT_LINES")[0, 0])
    document = json.loads(result.as_numpy("DOCUMENT")[0, 0])
    return lines, document


@pytest.fixture(scope="module")
def portraits() -> list[np.ndarray]:
    paths = fetch.fetch_test_photos()
    return [np.asarray(Image.open(paths[n]).convert("RGB"))
            for n in ("person_a_2", "person_b_1", "person_b_2", "impostor_1", "impostor_2")]


@pytest.fixture(scope="module")
def documents(portraits) -> list:
    rendered = []
    for seed in range(DOCUMENTS):
        rng = np.random.default_rng(1000 + seed)
        kind = ("td1", "td2", "td3")[seed % 3]
        rendered.append(render_document(random_identity(rng), kind,
                                        portraits[seed % len(portraits)], Degradation(), rng))
    return rendered


@pytest.fixture(scope="module")
def readings(server, documents) -> list:
    return [outputs(r) for r in read_all(server, [d.jpeg_bytes() for d in documents])]


def test_the_mrz_is_read_exactly_on_at_least_95_percent_of_documents(documents, readings):
    exact = [doc.fields == document["fields"] for doc, (_, document) in
             zip(documents, readings, strict=True)]
    misses = [(i, d.mrz_lines, r[1]["mrz"] and r[1]["mrz"]["lines"])
              for i, (d, r, ok) in enumerate(zip(documents, readings, exact, strict=True))
              if not ok]
    assert sum(exact) >= 0.95 * len(documents), misses


def test_every_exactly_read_mrz_is_valid_and_says_which_format(documents, readings):
    for doc, (_, document) in zip(documents, readings, strict=True):
        mrz = document["mrz"]
        if mrz is not None and tuple(mrz["lines"]) == doc.mrz_lines:
            assert mrz["valid"] is True, mrz
            assert mrz["format"] == doc.kind.upper()
            assert set(mrz["checks"]) == set(CHECKS)
            assert document["expired"] is False  # random identities expire in the future


def test_text_lines_carry_the_visual_zone_in_reading_order_with_boxes(documents, readings):
    doc, (lines, _) = documents[0], readings[0]
    texts = [line["text"] for line in lines]
    assert LAYOUTS[doc.kind].title in " ".join(texts).upper()  # IDENTITY CARD, PASSPORT
    assert doc.identity.surname.split("<")[0][:4] in " ".join(texts)
    height, width = doc.image.shape[:2]
    for line in lines:
        points = np.array(line["box"])
        assert points.shape == (4, 2) and 0 <= line["confidence"] <= 1
        assert (points[:, 0] <= width + 2).all() and (points[:, 1] <= height + 2).all()
    # The MRZ comes last: the bottom of the page.
    assert texts[-1] == doc.mrz_lines[-1]


def test_one_altered_mrz_digit_fails_its_check_and_the_document_on_every_copy(server, portraits):
    forged, expected = [], []
    for seed in range(DOCUMENTS):
        rng = np.random.default_rng(5000 + seed)
        identity = random_identity(rng)
        kind = ("td1", "td2", "td3")[seed % 3]
        genuine = render_document(identity, kind, None, None, rng)
        lines, failing = alter_mrz_digit(list(genuine.mrz_lines), rng)
        forged.append(render_document(identity, kind, portraits[seed % len(portraits)],
                                      Degradation(), rng, mrz_lines=lines))
        expected.append(failing)
    results = [outputs(r)[1] for r in read_all(server, [d.jpeg_bytes() for d in forged])]
    for document, failing, doc in zip(results, expected, forged, strict=True):
        assert document["mrz"] is not None, doc.mrz_lines
        assert document["mrz"]["valid"] is False, (doc.mrz_lines, document["mrz"])
        checks = document["mrz"]["checks"]
        assert any(checks[name] is False for name in failing), (failing, checks)


def test_an_image_without_text_has_no_mrz_and_empty_fields(server):
    rng = np.random.default_rng(3)
    texture = Image.fromarray(rng.integers(90, 110, (480, 640, 3), dtype=np.uint8))
    import io

    buffer = io.BytesIO()
    texture.save(buffer, format="PNG")
    ((lines, document),) = [outputs(r) for r in read_all(server, [buffer.getvalue()])]
    assert document["mrz"] is None and document["expired"] is None
    assert set(document["fields"].values()) == {None}
    assert lines == []


def test_bad_bytes_get_their_own_error_and_the_server_stays_healthy(server, documents):
    results = read_all(server, [documents[1].jpeg_bytes(), b"\x00not an image",
                                documents[1].jpeg_bytes()[:2000]])
    assert not isinstance(results[0], Exception)
    for bad in results[1:]:
        assert isinstance(bad, Exception) and "IMAGE" in bad.message()
        assert "INVALID_ARGUMENT" in str(bad.status())
    assert is_ready(server.options.http_url)
