"""kyc.verdict (the signed verdict) and kyc.decision.ledger (one token, one
verification), with kyc_decision's step around them."""

from __future__ import annotations

import json
import secrets

import numpy as np
import pytest

from decision_cases import CUSTODY, NOW, TODAY, embed, request
from kyc.decision.ledger import MemoryLedger, ledger_from_environ
from kyc.decision.policy import DecisionSettings
from kyc.decision.step import DecisionStep
from kyc.liveness.token import KEY_BYTES, LivenessClaims, TokenSealer
from kyc.pipeline.step import Request
from kyc.verdict import (
    VerdictError,
    VerdictSigner,
    application_ref,
    public_key_text,
    verify_verdict,
)

KEY = secrets.token_bytes(KEY_BYTES)


def test_a_signed_verdict_verifies_with_the_public_key_alone_and_an_edit_breaks_it():
    signer = VerdictSigner(KEY)
    report = {"decision": "approve", "signature": signer.sign({"decision": "approve",
                                                               "application": "A-1"})}
    public = public_key_text(signer.public_key)
    assert verify_verdict(json.dumps(report), public)["application"] == "A-1"
    edited = {**report, "signature": {**report["signature"],
                                      "signed": report["signature"]["signed"].replace(
                                          "approve", "reject")}}
    with pytest.raises(VerdictError, match="altered or forged"):
        verify_verdict(edited, public)
    other = public_key_text(VerdictSigner(secrets.token_bytes(KEY_BYTES)).public_key)
    with pytest.raises(VerdictError, match="signed with key"):
        verify_verdict(report, other)
    with pytest.raises(VerdictError, match="no Ed25519 signature"):
        verify_verdict({"decision": "approve"}, public)
    # the same token key gives the same signing key on every replica
    assert VerdictSigner(KEY).key_id == signer.key_id


def test_the_application_reference_is_short_printable_text():
    assert application_ref({}) is None and application_ref({"kyc_application": ""}) is None
    assert application_ref({"kyc_application": "app-42"}) == "app-42"
    for bad in ("x" * 129, "a\nb", 7):
        with pytest.raises(ValueError, match="kyc_application"):
            application_ref({"kyc_application": bad})


def test_the_memory_ledger_spends_a_token_once_and_forgets_it_at_its_expiry():
    now = [100.0]
    ledger = MemoryLedger(lambda: now[0])
    assert ledger.spend("t1", 150.0) and not ledger.spend("t1", 150.0)
    now[0] = 151.0
    assert ledger.spend("t1", 300.0)  # expired entries are swept
    assert ledger.spend("t2", 300.0, "h") and ledger.spend("t2", 300.0, "h")  # a retry
    assert not ledger.spend("t2", 300.0, "other")
    assert isinstance(ledger_from_environ({}), MemoryLedger)
    with pytest.raises(ValueError, match="redis://"):
        ledger_from_environ({"KYC_TOKEN_LEDGER": "http://x"})


def _step(settings: DecisionSettings | None = None) -> DecisionStep:
    return DecisionStep(settings or DecisionSettings(), 0.363, TokenSealer(KEY),
                        lambda f: np.zeros((len(f), 1), np.float32), embed, CUSTODY,
                        today=lambda: TODAY, clock=lambda: NOW + 1, signer=VerdictSigner(KEY))


def _token(application: str | None) -> np.ndarray:
    face = embed(np.zeros((1, 112, 112, 3), np.uint8))[0]
    claims = LivenessClaims("s1", True, 0.97, NOW, NOW + 120, ("left", "right"), face,
                            {"passive_pad": True}, application, secrets.token_hex(16))
    return np.array([[TokenSealer(KEY).seal(claims)]], dtype=np.object_)


def _verify(step: DecisionStep, token: np.ndarray, application: str | None,
            images: dict | None = None) -> dict:
    inputs = request(images, LIVENESS_TOKEN=token).inputs
    params = {} if application is None else {"kyc_application": application}
    answer, = step.run([Request(inputs, parameters=params)])
    return json.loads(answer["REPORT"][0, 0])


def test_a_token_serves_one_verification_of_the_application_its_start_named():
    step = _step()
    token = _token("app-1")
    other_app = _verify(step, token, "app-2")  # the mule: someone else's application
    assert "liveness_token_invalid" in other_app["reasons"]
    assert "another application" in other_app["liveness"]["problem"]
    first = _verify(step, token, "app-1")
    assert first["decision"] == "approve", first
    retried = _verify(step, token, "app-1")  # the same verification: its reply was lost
    assert retried["decision"] == "approve"
    other_document = {"DOC_": b"another document", "SELFIE_": b"selfie image"}
    again = _verify(step, token, "app-1", other_document)
    assert again["decision"] == "reject" and "liveness_token_reused" in again["reasons"]
    claims = verify_verdict(first, public_key_text(step.signer.public_key))
    assert claims["application"] == "app-1" and claims["decision"] == "approve"
    assert claims["liveness_token"] and set(claims["images"]) == {"document", "selfie"}


def test_an_unbound_token_is_taken_once_unless_the_operator_requires_binding():
    assert _verify(_step(), _token(None), None)["decision"] == "approve"
    strict = _verify(_step(DecisionSettings(require_bound_token=True)), _token(None), None)
    assert "liveness_token_invalid" in strict["reasons"]
