"""kyc.verdict at its edges: the canonical form other verifiers rebuild, the forms of the
public key a backend may hold, and reports refused however they are bent (make mutate
found each of these unheld by the other tests: docs/mutation-testing.md)."""

from __future__ import annotations

import base64
import json
import secrets

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from kyc.keys import KEY_BYTES
from kyc.verdict import (
    MAX_APPLICATION_CHARS,
    VerdictError,
    VerdictSigner,
    application_ref,
    canonical,
    public_key_text,
    verify_verdict,
)

SIGNER = VerdictSigner(secrets.token_bytes(KEY_BYTES))
NOW = 1_800_000_000


def _signed(**changes) -> dict:
    return SIGNER.sign({"decision": "approve", "reasons": [], "application": "A-1",
                        "issued_at": NOW, "fraud_score": 0.02, **changes})


def _check(report, key=None) -> dict:
    return verify_verdict(report, public_key_text(SIGNER.public_key) if key is None else key,
                          application="A-1", now=NOW + 1)


def test_the_signed_text_is_json_with_sorted_keys_no_spaces_and_ascii_only():
    assert canonical({"b": 1, "a": "é", "c": [1, {"e": None, "d": True}]}) == \
        '{"a":"\\u00e9","b":1,"c":[1,{"d":true,"e":null}]}'
    report = _signed(face={"z": 1, "a": 0.5}, surname="Müller")
    body = {k: v for k, v in report.items() if k != "signature"}
    assert report["signature"]["signed"] == canonical({**body, "v": 2})
    with pytest.raises(ValueError):  # JSON has no NaN: nothing signed holds one
        canonical({"score": float("nan")})


def test_a_report_whose_unsigned_part_was_edited_to_a_nan_is_refused():
    text = json.dumps(_signed()).replace('"fraud_score": 0.02', '"fraud_score": NaN')
    assert "NaN" in text
    with pytest.raises(VerdictError, match="differs from what was signed"):
        _check(text)


@pytest.mark.parametrize("form", ["object", "base64 text", "base64 bytes", "pem", "pem bytes"])
def test_the_public_key_is_taken_as_an_object_as_base64_and_as_pem(form):
    public = SIGNER.public_key
    pem = public.public_bytes(serialization.Encoding.PEM,
                              serialization.PublicFormat.SubjectPublicKeyInfo)
    key = {"object": public, "base64 text": public_key_text(public),
           "base64 bytes": public_key_text(public).encode() + b"\n",
           "pem": "\n  " + pem.decode(), "pem bytes": pem}[form]
    assert _check(_signed(), key)["decision"] == "approve"


def test_a_pem_key_of_another_kind_or_a_base64_key_with_stray_characters_is_refused():
    x25519 = X25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    with pytest.raises(VerdictError, match="not an Ed25519 public key"):
        _check(_signed(), x25519)
    text = public_key_text(SIGNER.public_key)
    with pytest.raises(VerdictError, match="32 bytes, base64-encoded, or PEM"):
        _check(_signed(), text[:10] + "!" + text[10:])


def test_a_signature_value_with_stray_characters_is_refused():
    report = _signed()
    value = report["signature"]["value"]
    report["signature"]["value"] = value[:10] + "!" + value[10:]
    with pytest.raises(VerdictError, match="signature does not hold"):
        _check(report)


@pytest.mark.parametrize("text", ["[]", "42", '"approve"', "null"])
def test_a_report_that_is_not_a_json_object_is_refused(text):
    with pytest.raises(VerdictError, match="no Ed25519 signature"):
        _check(text)


def test_a_signed_text_that_names_no_version_is_refused():
    report = _signed()
    body = {k: v for k, v in report.items() if k != "signature"}
    signed = canonical(body)  # no "v": a form no version of kyc_decision signs
    report["signature"].update(signed=signed, value=base64.b64encode(
        SIGNER._private.sign(signed.encode())).decode())
    with pytest.raises(VerdictError, match="version None is refused"):
        _check(report)


@pytest.mark.parametrize(("value", "taken"), [
    ("A" * MAX_APPLICATION_CHARS, True), ("A" * (MAX_APPLICATION_CHARS + 1), False),
    (" from space to tilde ~", True), ("\x1f", False), ("\x7f", False), ("é", False),
])
def test_the_application_reference_is_printable_ascii_from_space_to_tilde_up_to_128(value,
                                                                                   taken):
    if taken:
        assert application_ref({"kyc_application": value}) == value
    else:
        with pytest.raises(ValueError, match="printable ASCII"):
            application_ref({"kyc_application": value})
