"""kyc.pipeline.seal at its edges: how long a seal is taken, which forms are refused even
under the right key, what a digest reads of a tensor, and where the server's key comes
from; with kyc.decision.custody's refusals, each named (make mutate found each of these
unheld by the other tests: docs/mutation-testing.md)."""

from __future__ import annotations

import base64
import hashlib
import secrets

import numpy as np
import pytest

from decision_cases import CUSTODY, NOW, request
from kyc.decision.custody import check_custody
from kyc.keys import ENV_KEY, KEY_BYTES, derive_key
from kyc.pipeline.seal import (
    SEAL_LABEL,
    SEAL_VERSION,
    SealClaims,
    Sealer,
    SealError,
    application_digest,
    attestations,
    digest,
    pipeline_sealer,
    text_of,
)
from kyc.pipeline.step import RequestError
from kyc.verdict import image_digest

SEALER = Sealer(secrets.token_bytes(32))
TICKET = (2, 7, 1)


def _seal(issued_at: float = 1000.0, **options) -> str:
    return SEALER.seal(TICKET, issued_at, b"document", b"selfie", **options)


@pytest.mark.parametrize(("now", "taken"), [
    (1060.0, True), (1060.001, False),  # its maximum age (60 s here), not a millisecond more
    (995.0, True), (994.999, False),  # 5 s early (clocks apart), not a millisecond more
])
def test_a_seal_is_taken_from_5_s_before_it_was_made_to_its_maximum_age(now, taken):
    if taken:
        assert SEALER.open_seal(_seal(), TICKET, now, 60.0).issued_at == 1000.0
    else:
        with pytest.raises(SealError, match="older than 60 s"):
            SEALER.open_seal(_seal(), TICKET, now, 60.0)


def test_an_opened_seal_gives_the_ticket_time_images_token_and_application_it_sealed():
    claims = SEALER.open_seal(_seal(1000.25, token=b"kyc2.t", application="A-1"), TICKET,
                              1001.0, 60.0)
    assert claims == SealClaims(TICKET, 1000.25, digest(b"document"), digest(b"selfie"),
                                digest(b"kyc2.t"), application_digest("A-1"))


def _tagged(*fields: str) -> str:
    """Fields under SEALER's MAC, whatever their form: what only a key holder could make."""
    return ".".join([*fields, SEALER._tag(*fields)])


def test_a_seal_of_another_version_or_form_is_refused_even_under_the_right_key():
    fields = _seal().split(".")[:-1]
    for forged in (_tagged("s1", *fields[1:]), _tagged(*fields, "extra"), "s2.1.2"):
        with pytest.raises(SealError, match="no seal of kyc_intake"):
            SEALER.open_seal(forged, TICKET, 1001.0, 60.0)
    seal = _seal()
    altered = seal[:-1] + ("1" if seal[-1] == "0" else "0")
    with pytest.raises(SealError, match="the seal of kyc_intake does not hold"):
        SEALER.open_seal(altered, TICKET, 1001.0, 60.0)
    with pytest.raises(SealError, match="another admission ticket"):
        SEALER.open_seal(_tagged(SEAL_VERSION, *fields[1:]), (2, 7, 2), 1001.0, 60.0)


def test_an_attestation_of_another_form_is_refused_even_under_the_right_key():
    outputs = {"DOCUMENT": np.array([b"{}"], dtype=np.object_)}
    good = SEALER.attest("ocr_fields", "img", outputs)
    assert SEALER.attested_image("ocr_fields", good, outputs) == "img"
    with pytest.raises(SealError, match="no attestation of the ocr_fields step"):
        SEALER.attested_image("ocr_fields", good + ".extra", outputs)
    with pytest.raises(SealError, match="attestation of the ocr_fields step does not hold"):
        SEALER.attested_image("ocr_fields", good[:-1] + "x", outputs)


def test_an_image_digest_is_the_first_32_hex_digits_of_sha256_over_b_and_its_bytes():
    """What docs/client.md tells a backend to compute for REPORT's images."""
    assert image_digest(b"doc") == hashlib.sha256(b"b" + b"doc").hexdigest()[:32]


def test_a_string_tensor_is_digested_by_its_items_bytes_in_whatever_form_they_arrive():
    as_bytes = np.array([[b"ab", b"c"]], dtype=np.object_)
    as_text = np.array([["ab", "c"]], dtype=np.object_)
    elsewhere = np.array([[bytes(bytearray(b"ab")), bytes(bytearray(b"c"))]], dtype=np.object_)
    assert digest(as_bytes[0]) == digest(as_text[0]) == digest(elsewhere[0])
    assert digest(as_bytes) == digest(elsewhere) == digest(as_text)  # not where they sit
    assert digest(np.array([[b"a", b"bc"]], dtype=np.object_)) != digest(as_bytes)


def test_the_server_sealer_is_derived_from_the_token_key_of_the_environment_given(
        monkeypatch):
    monkeypatch.delenv(ENV_KEY, raising=False)
    key = secrets.token_bytes(KEY_BYTES)
    sealer = pipeline_sealer({ENV_KEY: base64.b64encode(key).decode()})
    seal = sealer.seal(TICKET, 1000.0, b"document", None)
    assert Sealer(derive_key(key, SEAL_LABEL)).open_seal(seal, TICKET, 1000.0, 60.0)
    assert pipeline_sealer({}) is None


def test_the_attestations_of_a_step_are_a_string_tensor_empty_without_a_key_or_an_image():
    outputs = {"DOCUMENT": np.array([[b"{}"], [b"{}"]], dtype=np.object_)}
    rows = attestations(SEALER, "ocr_fields", ["img", None], outputs, ["DOCUMENT"])
    assert rows.dtype == np.object_ and rows.shape == (2, 1) and rows[1, 0] == b""
    assert SEALER.attested_image("ocr_fields", rows[0, 0].decode(),
                                 {"DOCUMENT": outputs["DOCUMENT"][0]}) == "img"
    unsealed = attestations(None, "ocr_fields", ["img"], outputs, ["DOCUMENT"])
    assert unsealed.dtype == np.object_ and unsealed.tolist() == [[b""]]


def test_text_of_reads_a_row_a_scalar_an_empty_row_and_bytes_that_are_not_utf8():
    assert text_of(np.array([[b"a"], [b"b"]], dtype=np.object_), 1) == "b"
    assert text_of(np.array(b"scalar", dtype=np.object_)) == "scalar"
    assert text_of(np.zeros((1, 0), dtype=np.object_)) == ""
    assert text_of(np.array([[b"\xffok"]], dtype=np.object_)) == "\ufffdok"
    assert text_of(np.array([["text"]], dtype=np.object_)) == "text"


# -- kyc.decision.custody: each refusal says what failed --------------------------------
def _refusal(arrays: dict) -> str:
    with pytest.raises(RequestError) as refused:
        check_custody(CUSTODY, arrays, NOW + 1, 60.0, None)
    return str(refused.value)


def test_custody_names_the_inputs_missing_and_a_ticket_of_more_than_one_row():
    honest = dict(request().inputs)
    missing = {k: v for k, v in honest.items() if k not in ("SEAL", "ADMISSION")}
    assert "(missing SEAL, ADMISSION)" in _refusal(missing)
    two_rows = {**honest, "ADMISSION": np.repeat(honest["ADMISSION"], 2, axis=0)}
    assert "ADMISSION holds 2 rows, one is expected" in _refusal(two_rows)


def test_custody_reads_a_token_that_arrives_as_text_as_its_utf8_bytes():
    token = np.array([[b"kyc2.token"]], dtype=np.object_)
    arrays = dict(request(LIVENESS_TOKEN=token).inputs)
    as_text = {**arrays, "LIVENESS_TOKEN": np.array([["kyc2.token"]], dtype=np.object_)}
    assert check_custody(CUSTODY, as_text, NOW + 1, 60.0, None).token == digest(b"kyc2.token")
