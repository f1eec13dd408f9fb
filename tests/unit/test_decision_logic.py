"""kyc_decision's step without Triton (DecisionStep: served and in ``kyc bench``)."""

from __future__ import annotations

import dataclasses
import json
import secrets

import numpy as np
import pytest

from decision_cases import (
    CUSTODY,
    DOCUMENT,
    IMAGES,
    NOW,
    TODAY,
    TicketsBack,
    decision_step,
    embed,
    request,
    sealed,
    text,
)
from kyc.decision.features import FEATURES
from kyc.decision.policy import DecisionSettings
from kyc.decision.step import DecisionStep
from kyc.face.match import FaceThresholds
from kyc.keys import KEY_BYTES
from kyc.liveness.token import TokenSealer
from kyc.pipeline.seal import Sealer
from kyc.pipeline.step import Request, RequestError


def step(score) -> DecisionStep:
    return DecisionStep(DecisionSettings(), FaceThresholds(0.363, 0.363),
                        TokenSealer(secrets.token_bytes(KEY_BYTES)),
                        score, embed, CUSTODY, today=lambda: TODAY, clock=lambda: NOW + 1)


def test_a_batch_is_scored_by_one_antifraud_call_and_a_bad_request_answers_alone():
    calls = []

    def score(features: np.ndarray) -> np.ndarray:
        calls.append(features.shape)
        return np.array([[0.1], [0.2]], np.float32)

    answers = step(score).run([request(), request(DOCUMENT=None), request()])
    assert calls == [(2, len(FEATURES))]
    assert isinstance(answers[1], RequestError) and "DOCUMENT" in str(answers[1])
    for answer, fraud in ((answers[0], 0.1), (answers[2], 0.2)):
        assert answer["DECISION"][0, 0] == b"review"
        assert json.loads(answer["REPORT"][0, 0])["reasons"] == ["liveness_missing"]
        assert answer["FACE_MATCH_SCORE"][0, 0] == pytest.approx(1.0)
        assert answer["FRAUD_SCORE"][0, 0] == pytest.approx(fraud)


def test_a_failing_antifraud_model_fails_the_whole_batch():
    def score(features: np.ndarray) -> np.ndarray:
        raise RuntimeError("antifraud is down")

    with pytest.raises(RuntimeError, match="antifraud is down"):
        step(score).run([request(), request()])


def test_the_lines_read_as_the_mrz_are_its_confidence_and_not_the_visual_zone():
    def score(features: np.ndarray) -> np.ndarray:
        return np.zeros((len(features), 1), np.float32)

    lines = [{"text": "BERG", "confidence": 0.9, "mrz": False},
             {"text": "P<UTOBERG<<ANNA<<<<<<<<<<<<<", "confidence": 0.8, "mrz": True},
             {"text": "X12045<<<UTO9005012F3001019", "confidence": 0.6, "mrz": True}]
    with_mrz = {**DOCUMENT, "mrz": {**DOCUMENT["mrz"], "lines": ["P<UTO...", "X12045..."]}}
    (answer, no_mrz) = step(score).run([request(TEXT_LINES=text(lines), DOCUMENT=text(with_mrz)),
                                        request(TEXT_LINES=text(lines))])
    features = json.loads(answer["REPORT"][0, 0])["fraud_features"]
    assert features["mrz_confidence"] == pytest.approx(0.7)
    # without MRZ lines in DOCUMENT, no reading counts as the MRZ
    assert json.loads(no_mrz["REPORT"][0, 0])["fraud_features"]["mrz_confidence"] == 0.0


def _refused(answer) -> bool:
    return isinstance(answer, RequestError) and "did not come through kyc_ensemble" in str(answer)


def test_a_request_the_pipeline_did_not_seal_and_attest_is_refused_before_anything_is_read():
    """The review's attack: kyc_decision called directly with the caller's own faces and
    a DOCUMENT of its own writing."""
    def score(features):
        raise AssertionError("antifraud must not be asked")

    forged = dict(request().inputs)
    for name in ("SEAL", "DOC_ATTESTATION", "SELFIE_ATTESTATION", "DOCUMENT_ATTESTATION"):
        answer, = step(score).run([Request({k: v for k, v in forged.items() if k != name})])
        assert _refused(answer), name
    other_key = Request(sealed(dict(forged), Sealer(secrets.token_bytes(32))))
    assert _refused(step(score).run([other_key])[0])


def test_an_edited_document_or_a_face_of_another_image_breaks_the_chain():
    def score(features):
        return np.zeros((len(features), 1), np.float32)

    honest = dict(request().inputs)
    made_up = {**DOCUMENT, "fields": {**DOCUMENT["fields"], "surname": "MADEUP"}}
    assert _refused(step(score).run([Request({**honest, "DOCUMENT": text(made_up)})])[0])
    other_face = np.full((1, 112, 112, 3), 1, np.uint8)
    assert _refused(step(score).run([Request({**honest, "SELFIE_FACE": other_face})])[0])
    swapped = {**honest, "DOC_ATTESTATION": honest["SELFIE_ATTESTATION"]}  # the selfie's image
    assert _refused(step(score).run([Request(swapped)])[0])
    assert not isinstance(step(score).run([Request(honest)])[0], Exception)


def test_a_stale_seal_is_refused_and_a_refused_request_gives_back_no_ticket():
    back = TicketsBack()
    late = decision_step(secrets.token_bytes(KEY_BYTES), admission=back,
                         clock=NOW + DecisionSettings().seal_max_age_s + 1)
    assert _refused(late.run([request()])[0]) and back.rows == []


def test_ocr_fields_reads_only_a_canvas_ocr_preprocess_attested_and_attests_what_it_read():
    """A direct call to ocr_fields with a canvas of the caller's making gets no reading
    that kyc_decision would take."""
    from kyc.document.step import CANVAS_ATTESTED, CANVAS_KIND, OcrPostprocessStep
    from kyc.pipeline.seal import digest

    class Reader:  # the page reading is not under test here
        def read(self, pages):
            return [[] for _ in pages]

    step = OcrPostprocessStep(Reader(), None, CUSTODY)
    page = {"CANVAS": np.zeros((1, 8, 8, 3), np.uint8), "PROB_MAP": np.zeros((1, 8, 8), np.float32),
            "SCALE": np.ones((1, 2), np.float32)}
    good = CUSTODY.attest(CANVAS_KIND, digest(IMAGES["DOC_"]),
                          {n: page[n][0] for n in CANVAS_ATTESTED})
    other = {**page, "CANVAS": np.ones((1, 8, 8, 3), np.uint8)}
    for inputs, attestation in ((page, b""), (other, good.encode()),
                                (page, Sealer(b"x" * 32).attest(CANVAS_KIND, "d", {}).encode())):
        answer, = step.run([Request({**inputs, "CANVAS_ATTESTATION":
                                     np.array([[attestation]], dtype=np.object_)})])
        assert isinstance(answer, RequestError) and "CANVAS_ATTESTATION" in str(answer)
    answer, = step.run([Request({**page, "CANVAS_ATTESTATION":
                                 np.array([[good.encode()]], dtype=np.object_)})])
    assert CUSTODY.attested_image("document", answer["ATTESTATION"][0, 0].decode(),
                                  {n: answer[n][0] for n in ("DOCUMENT", "TEXT_LINES")}
                                  ) == digest(IMAGES["DOC_"])
    unattested, = step.run([Request(page)])  # document_ocr: read, never attested
    assert unattested["ATTESTATION"][0, 0] == b""


def test_a_bad_tensor_from_an_earlier_step_is_an_internal_error_and_a_bad_parameter_the_clients():
    """A DOCUMENT that is not JSON can only come from a step's bug (the chain of custody
    holds): it answers as an internal error, so that its text never reaches the client;
    a bad kyc_application is the client's, and says so."""
    broken = request(DOCUMENT=np.array([[b"{not json"]], dtype=np.object_))
    bad_parameter = dataclasses.replace(request(), parameters={"kyc_application": "\x00"})
    internal, client, fine = step(lambda f: np.full((len(f), 1), 0.1, np.float32)).run(
        [broken, bad_parameter, request()])
    assert isinstance(internal, Exception) and not isinstance(internal, RequestError)
    assert isinstance(client, RequestError) and "kyc_application" in str(client)
    assert fine["DECISION"][0, 0] == b"review"


def _no_score(features):
    return np.zeros((len(features), 1), np.float32)


def test_a_seal_replayed_with_another_token_or_for_another_application_is_refused():
    """A seal and its attestations replayed straight to kyc_decision within its 60 s,
    with another token or for another application, are worth nothing."""
    token = np.array([[b"kyc2.token-one"]], dtype=np.object_)
    sealed_for = request(application="app-1", LIVENESS_TOKEN=token)
    assert not isinstance(step(_no_score).run([sealed_for])[0], Exception)
    other_token = {**sealed_for.inputs,
                   "LIVENESS_TOKEN": np.array([[b"kyc2.token-two"]], dtype=np.object_)}
    answer, = step(_no_score).run([Request(other_token, parameters=sealed_for.parameters)])
    assert _refused(answer) and "another liveness token" in str(answer)
    no_token = {**sealed_for.inputs, "LIVENESS_TOKEN": np.array([[b""]], dtype=np.object_)}
    assert _refused(step(_no_score).run([Request(no_token,
                                                 parameters=sealed_for.parameters)])[0])
    for parameters in ({"kyc_application": "app-2"}, {}):
        answer, = step(_no_score).run([Request(sealed_for.inputs, parameters=parameters)])
        assert _refused(answer) and "another kyc_application" in str(answer)


def test_the_seals_ticket_must_be_the_requests_and_a_mismatch_gives_back_nothing():
    back = TicketsBack()
    checked = decision_step(secrets.token_bytes(KEY_BYTES), admission=back)
    honest = dict(request().inputs)
    for ticket in ((0, 5, 1), (1, -1, -1), (0, -1, 0)):
        answer, = checked.run([Request({**honest, "ADMISSION": np.array([ticket], np.int64)})])
        assert _refused(answer) and "another admission ticket" in str(answer), ticket
    assert back.rows == []
    checked.run([Request(honest)])
    assert [(row.tolist(), teaches) for row, teaches in back.rows] == [([[0, -1, -1]], True)]
    blank = request(TEXT_LINES=text([]))  # its reading found nothing: freed, not taught
    checked.run([blank])
    assert back.rows[-1][1] is False


def test_a_reading_or_a_face_attested_for_another_image_than_the_sealed_one_is_refused():
    """Genuine attestations of the steps, each for an image the seal does not name."""
    from kyc.document.step import DOCUMENT_ATTESTED, DOCUMENT_KIND
    from kyc.face.step import ATTESTATION_KIND, ATTESTED
    from kyc.pipeline.seal import digest

    honest = dict(request().inputs)
    elsewhere = digest(b"a page of someone else")
    reading = CUSTODY.attest(DOCUMENT_KIND, elsewhere,
                             {n: honest[n][0] for n in DOCUMENT_ATTESTED}).encode()
    answer, = step(_no_score).run([Request({**honest, "DOCUMENT_ATTESTATION":
                                            np.array([[reading]], dtype=np.object_)})])
    assert _refused(answer) and "document's reading" in str(answer)
    for prefix, what in (("DOC_", "document face"), ("SELFIE_", "selfie face")):
        face = CUSTODY.attest(ATTESTATION_KIND, elsewhere,
                              {n: honest[prefix + n][0] for n in ATTESTED}).encode()
        answer, = step(_no_score).run([Request({**honest, prefix + "ATTESTATION":
                                                np.array([[face]], dtype=np.object_)})])
        assert _refused(answer) and what in str(answer), prefix


def test_without_a_key_ocr_postprocess_reads_pages_whose_canvas_nobody_attested():
    """document_ocr in process without a token key (the bench's runner): ocr_preprocess
    attests nothing, and ocr_postprocess reads the pages; an attestation it cannot
    check is still refused."""
    from kyc.document.step import OcrPostprocessStep

    class Reader:
        def read(self, pages):
            return [[] for _ in pages]

    step = OcrPostprocessStep(Reader(), None, None)
    page = {"CANVAS": np.zeros((2, 8, 8, 3), np.uint8), "PROB_MAP": np.zeros((2, 8, 8), np.float32),
            "SCALE": np.ones((2, 2), np.float32)}
    blank = np.array([[b""], [b""]], dtype=np.object_)
    answer, = step.run([Request({**page, "CANVAS_ATTESTATION": blank})])
    assert answer["ATTESTATION"].tolist() == [[b""], [b""]]
    claimed = np.array([[b""], [b"a1.d.t"]], dtype=np.object_)
    answer, = step.run([Request({**page, "CANVAS_ATTESTATION": claimed})])
    assert isinstance(answer, RequestError) and "no key" in str(answer)
