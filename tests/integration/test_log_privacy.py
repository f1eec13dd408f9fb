"""No personal data in the server log: the end-to-end flows run on a server of their own
with Triton's verbose logging on, then the whole log is searched for what they sent
and got back (names, document numbers, MRZ lines, embeddings, image bytes, tokens)."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from PIL import Image

from kyc_client.liveness import bytes_input
from kyc_testing import (
    Person,
    ensemble_inputs,
    live_session,
    searchable,
    shipped_copy,
    start_server,
)
from kyc_tools.assets.fetch import fetch_test_photos
from kyc_tools.dev.synthetic.document import Degradation, random_identity, render_document

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def flows(tmp_path_factory):
    """Runs every flow; returns the server log and everything personal that was sent or
    answered."""
    root = tmp_path_factory.mktemp("privacy")
    log_file = root / "server.log"
    server = start_server(shipped_copy(root / "repo"), log_file, log_verbose=1)
    photos = fetch_test_photos()
    client = grpcclient.InferenceServerClient(server.options.grpc_url)
    secrets: dict[str, list] = {"text": [], "images": [], "floats": []}
    try:
        rng = np.random.default_rng(17)
        portrait = np.asarray(Image.open(photos["person_a_1"]).convert("RGB"))
        documents = []
        for _ in range(2):
            identity = random_identity(rng)
            rendered = render_document(identity, "td3", portrait, Degradation(), rng)
            documents.append(rendered.jpeg_bytes())
            secrets["text"] += [*searchable(identity.surname, identity.given_names,
                                            identity.document_number), *rendered.mrz_lines]
        selfie, impostor = (photos[k].read_bytes() for k in ("person_a_2", "impostor_1"))
        secrets["images"] += [*documents, selfie, impostor]

        # a liveness session to a token (named: its client and customer ids are personal)
        secrets["text"] += ["device-8f3c2a91d0", "applicant-55128734"]
        end = live_session(server.options.grpc_url, Person(server.options.grpc_url),
                           client_id="device-8f3c2a91d0", customer_id="applicant-55128734")[-1]
        assert not isinstance(end, Exception) and end.is_live
        secrets["text"].append(end.token.decode()[5:45])

        decisions = []
        for document, face in ((documents[0], selfie), (documents[1], impostor)):
            result = client.infer("kyc_ensemble", ensemble_inputs(document, face, end.token))
            decisions.append(json.loads(result.as_numpy("REPORT")[0, 0])["decision"])
        assert decisions == ["review", "reject"]  # review: no passive PAD is shipped
        ocr = json.loads(client.infer("document_ocr", [bytes_input("IMAGE", documents[0])])
                         .as_numpy("DOCUMENT")[0, 0])
        assert ocr["fields"]["document_number"] in secrets["text"]
        face = client.infer("face_preprocess", [bytes_input("IMAGE", selfie)]).as_numpy("FACE")
        tensor = grpcclient.InferInput("FACE", list(face.shape), "UINT8")
        tensor.set_data_from_numpy(face)
        embedding = client.infer("face_embedding", [tensor]).as_numpy("EMBEDDING")[0]
        secrets["floats"] = [float(v) for v in embedding if abs(v) > 0.05][:6]
        # bad input: an undecodable image, a garbage token
        with pytest.raises(Exception, match=r"INVALID_ARG|not a JPEG"):
            client.infer("face_preprocess",
                         [bytes_input("IMAGE", b"\xff\xd8\xff" + selfie[100:400])])
        client.infer("kyc_ensemble",
                     ensemble_inputs(documents[1], selfie, b"kyc1." + end.token[5:60]))
    finally:
        client.close()
        server.stop()
    return log_file.read_bytes(), secrets


def test_the_verbose_log_is_there_and_names_the_models(flows):
    log, _ = flows
    assert len(log) > 10_000 and b"kyc_ensemble" in log and b"liveness_sequence" in log


def test_no_name_document_number_mrz_line_or_token_in_the_log(flows):
    log, secrets = flows
    text = log.decode(errors="replace")
    for secret in secrets["text"]:
        assert secret not in text, f"{secret[:4]}... appears in the server log"
    runs = re.findall(r"[A-Z0-9<]{30,}", text)
    assert not runs, f"MRZ-like text in the server log: {runs[0][:8]}..."


def test_no_embedding_values_in_the_log(flows):
    log, secrets = flows
    text = log.decode(errors="replace")
    shown = [v for v in secrets["floats"] if f"{v:.5f}"[:-1] in text]
    assert len(shown) < 2, "embedding values appear in the server log"


def test_no_image_bytes_in_the_log(flows):
    log, secrets = flows
    for magic in (b"\xff\xd8\xff", b"\x89PNG", b"/9j/", b"iVBORw0KGgo"):
        assert magic not in log
    for image in secrets["images"]:
        assert base64.b64encode(image[200:224]) not in log
        assert image[200:224].hex().encode() not in log
