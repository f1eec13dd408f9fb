"""kyc_decision's step without Triton (DecisionStep: served and in ``kyc bench``)."""

from __future__ import annotations

import json
import secrets
from datetime import date

import numpy as np
import pytest

from kyc.decision.features import FEATURES
from kyc.decision.policy import DecisionSettings
from kyc.decision.step import DecisionStep
from kyc.liveness.token import KEY_BYTES, TokenSealer
from kyc.pipeline.step import Request, RequestError

TODAY = date(2026, 11, 22)
DOCUMENT = {
    "mrz": {"format": "TD3", "lines": [], "valid": True, "corrections": 0,
            "checks": {"document_number": True, "birth_date": True, "expiry_date": True,
                       "optional_data": True, "composite": True}},
    "fields": {"surname": "BERG", "given_names": "ANNA", "document_number": "X12045",
               "birth_date": "1990-05-01", "expiry_date": "2030-01-01"},
}


def text(value) -> np.ndarray:
    return np.array([[json.dumps(value).encode()]], dtype=np.object_)


def request(**changes) -> Request:
    """kyc_decision's inputs for one customer (batch of 1): both faces found, the
    same embedding, a valid MRZ, no liveness token."""
    embedding = np.array([[1.0, 0.0, 0.0, 0.0]], np.float32)
    arrays = {"DOC_FACE_FOUND": np.array([[True]]), "DOC_EMBEDDING": embedding,
              "DOC_NUM_FACES": np.array([[1]], np.int32), "DOC_QUALITY": text({}),
              "SELFIE_FACE_FOUND": np.array([[True]]), "SELFIE_EMBEDDING": embedding,
              "SELFIE_NUM_FACES": np.array([[1]], np.int32), "SELFIE_QUALITY": text({}),
              "DOCUMENT": text(DOCUMENT), "TEXT_LINES": text([]),
              "LIVENESS_TOKEN": np.array([[b""]], dtype=np.object_)}
    return Request({k: v for k, v in {**arrays, **changes}.items() if v is not None})


def step(score) -> DecisionStep:
    return DecisionStep(DecisionSettings(), 0.363, TokenSealer(secrets.token_bytes(KEY_BYTES)),
                        score, today=lambda: TODAY)


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
