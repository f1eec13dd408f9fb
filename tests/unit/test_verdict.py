"""kyc.verdict: the signed verdict covers the whole REPORT, and a backend checks the
application it expected, the age and the images; with kyc_decision's step around it."""

from __future__ import annotations

import base64
import copy
import json
import secrets

import numpy as np
import pytest

from decision_cases import IMAGES, NOW, decision_step, live_token, request
from kyc.decision.step import DecisionStep
from kyc.keys import KEY_BYTES
from kyc.pipeline.modelconfig import Repository
from kyc.verdict import (
    CLOCK_SKEW_S,
    MAX_AGE_S,
    VerdictError,
    VerdictSigner,
    application_ref,
    canonical,
    image_digest,
    public_key_text,
    verify_verdict,
)

KEY = secrets.token_bytes(KEY_BYTES)
SIGNER = VerdictSigner(KEY)
PUBLIC = public_key_text(SIGNER.public_key)


def _report(**changes) -> dict:
    return {"decision": "approve", "reasons": [], "application": "A-1", "issued_at": int(NOW),
            "document": {"fields": {"surname": "BERG", "document_number": "X12045"}},
            "face": {"match_score": 0.71, "document_face_found": True},
            "fraud_score": 0.02, "images": {"document": image_digest(b"doc"),
                                            "selfie": image_digest(b"selfie")}, **changes}


def _check(report, **options) -> dict:
    return verify_verdict(report, PUBLIC, **{"application": "A-1", "now": NOW + 1, **options})


def test_a_signed_report_verifies_with_the_public_key_alone_and_names_what_it_judged():
    signed = SIGNER.sign(_report())
    claims = _check(json.dumps(signed), images=(b"doc", b"selfie"))
    assert claims == {k: v for k, v in signed.items() if k != "signature"}
    assert claims["document"]["fields"]["surname"] == "BERG"
    assert VerdictSigner(KEY).key_id == SIGNER.key_id  # every replica signs alike


@pytest.mark.parametrize("edit", [
    lambda r: r["document"]["fields"].update(surname="MULE"),  # another person
    lambda r: r["document"]["fields"].update(document_number="Z99999"),
    lambda r: r["face"].update(match_score=0.99),
    lambda r: r.update(fraud_score=0.0),
    lambda r: r.update(decision="reject"),
    lambda r: r.update(reasons=["liveness_missing"]),
    lambda r: r.update(images={"document": "0" * 32, "selfie": "1" * 32}),
    lambda r: r.update(extra="field"),
    lambda r: r.pop("fraud_score"),
    lambda r: r["face"].update(document_face_found=1),  # equal in Python, not in JSON
], ids=["surname", "number", "match", "fraud", "decision", "reasons", "images", "added",
        "removed", "type"])
def test_changing_any_field_of_a_signed_report_breaks_its_verification(edit):
    report = SIGNER.sign(_report())
    edited = copy.deepcopy(report)
    edit(edited)
    with pytest.raises(VerdictError, match="differs from what was signed"):
        _check(edited)


def test_an_altered_signed_text_another_key_no_signature_and_version_1_are_refused():
    report = SIGNER.sign(_report())
    forged = copy.deepcopy(report)
    forged["signature"]["signed"] = forged["signature"]["signed"].replace("approve", "reject")
    with pytest.raises(VerdictError, match="altered or forged"):
        _check(forged)
    other = public_key_text(VerdictSigner(secrets.token_bytes(KEY_BYTES)).public_key)
    with pytest.raises(VerdictError, match="signed with key"):
        verify_verdict(report, other, application="A-1", now=NOW)
    with pytest.raises(VerdictError, match="no Ed25519 signature"):
        _check({"decision": "approve"})
    # a verdict of version 1 by the same key: its claims signed, the identity outside
    signed = canonical({"v": 1, "decision": "approve", "application": "A-1"})
    old = {**report, "signature": {**report["signature"], "signed": signed,
                                   "value": base64.b64encode(SIGNER._private.sign(
                                       signed.encode())).decode()}}
    with pytest.raises(VerdictError, match="version 1 is refused"):
        _check(old)


def test_a_verdict_of_another_application_or_of_none_is_refused():
    report = SIGNER.sign(_report())
    with pytest.raises(VerdictError, match="another application"):
        _check(report, application="A-2")
    with pytest.raises(VerdictError, match="another application"):
        _check(report, application=None)
    unbound = SIGNER.sign(_report(application=None))
    assert _check(unbound, application=None)["application"] is None
    with pytest.raises(VerdictError, match="another application"):
        _check(unbound, application="A-1")


def test_a_verdict_older_than_the_maximum_age_or_from_the_future_is_refused():
    report = SIGNER.sign(_report())
    assert _check(report, now=NOW + MAX_AGE_S)
    with pytest.raises(VerdictError, match=f"older than {MAX_AGE_S:g} s"):
        _check(report, now=NOW + MAX_AGE_S + 1)
    assert _check(report, now=NOW + 10 * MAX_AGE_S, max_age_s=None)  # an audit
    with pytest.raises(VerdictError, match="older than 5 s"):
        _check(report, now=NOW + 6, max_age_s=5)
    assert _check(report, now=NOW - CLOCK_SKEW_S)
    with pytest.raises(VerdictError, match="in the future"):
        _check(report, now=NOW - CLOCK_SKEW_S - 1)
    with pytest.raises(VerdictError, match="no issued_at"):
        _check(SIGNER.sign({k: v for k, v in _report().items() if k != "issued_at"}))


def test_a_verdict_of_other_images_than_the_backend_sent_is_refused():
    report = SIGNER.sign(_report())
    assert _check(report, images=(b"doc", b"selfie"))
    for images in ((b"doc", b"other selfie"), (b"other doc", b"selfie"), (b"selfie", b"doc")):
        with pytest.raises(VerdictError, match="other images"):
            _check(report, images=images)


def test_a_figure_that_is_not_finite_is_signed_as_null_and_verifies():
    report = SIGNER.sign(_report(face={"match_score": float("nan"), "q": [float("inf")]}))
    assert report["face"] == {"match_score": None, "q": [None]}
    assert _check(json.loads(json.dumps(report)))["face"]["match_score"] is None


def test_the_application_reference_is_short_printable_text():
    assert application_ref({}) is None and application_ref({"kyc_application": ""}) is None
    assert application_ref({"kyc_application": "app-42"}) == "app-42"
    for bad in ("x" * 129, "a\nb", 7):
        with pytest.raises(ValueError, match="kyc_application"):
            application_ref({"kyc_application": bad})


# -- kyc_decision's verdicts ------------------------------------------------------------
def _step(**options) -> DecisionStep:
    return decision_step(KEY, signer=SIGNER, **options)


def _token(application: str | None) -> np.ndarray:
    return live_token(KEY, application)


def _verify(step: DecisionStep, token: np.ndarray, application: str | None,
            images: dict | None = None) -> dict:
    answer, = step.run([request(images, application, LIVENESS_TOKEN=token)])
    return json.loads(answer["REPORT"][0, 0])


def test_kyc_decisions_verdict_signs_the_identity_and_scores_a_backend_acts_on():
    report = _verify(_step(), _token("app-1"), "app-1")
    claims = verify_verdict(report, PUBLIC, application="app-1", now=NOW + 2,
                            images=(IMAGES["DOC_"], IMAGES["SELFIE_"]))
    assert claims["decision"] == "approve", claims
    assert claims["document"]["fields"]["surname"] == "BERG"
    assert claims["issued_at"] == int(NOW + 1) and claims["liveness_token"]
    for path, value in ((("document", "fields", "surname"), "MULE"),
                        (("face", "match_score"), 0.99), (("fraud_score",), 0.5)):
        edited = copy.deepcopy(report)
        *parents, last = path
        target = edited
        for key in parents:
            target = target[key]
        target[last] = value
        with pytest.raises(VerdictError, match="differs from what was signed"):
            verify_verdict(edited, PUBLIC, application="app-1", now=NOW + 2)


def test_the_verdict_names_the_model_versions_serving_not_the_newest_on_disk(tmp_path):
    for model, versions in (("face_embedding", (1, 2)), ("antifraud", (3,)), ("gone", (1,))):
        (tmp_path / model).mkdir()
        (tmp_path / model / "config.pbtxt").write_text(f'name: "{model}"\n')
        for version in versions:
            (tmp_path / model / str(version)).mkdir()
    loaded = {("face_embedding", 1), ("antifraud", 3)}  # version 2 failed to load
    step = _step(repository=Repository(tmp_path), is_ready=lambda m, v: (m, v) in loaded)
    report = _verify(step, _token(None), None)
    assert report["models"] == {"antifraud": 3, "face_embedding": 1}
    everything = _verify(_step(repository=Repository(tmp_path)), _token(None), None)
    assert everything["models"] == {"antifraud": 3, "face_embedding": 2, "gone": 1}


def test_the_sdks_verification_checks_its_report_as_a_backend_must():
    from kyc_client.sdk import Verification

    signed = SIGNER.sign(_report())
    result = Verification("approve", [], 0.71, 0.9, 0.02, json.loads(json.dumps(signed)))
    assert result.signed(PUBLIC, application="A-1", now=NOW + 1)["document"]["fields"]
    with pytest.raises(VerdictError, match="another application"):
        result.signed(PUBLIC, application="A-2", now=NOW + 1)
    with pytest.raises(VerdictError, match="older than"):
        result.signed(PUBLIC, application="A-1", now=NOW + 10 * MAX_AGE_S)
