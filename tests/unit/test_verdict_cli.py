"""``kyc verdict``: the public key a backend keeps, and a REPORT checked from a shell as a
backend must check it (kyc.verdict.verify_verdict)."""

from __future__ import annotations

import base64
import json
import secrets
import time

import pytest

from kyc.verdict import VerdictSigner, image_digest, public_key_text
from kyc_tools.cli import main

KEY = secrets.token_bytes(32)


@pytest.fixture
def files(tmp_path):
    """A signed REPORT of application A-1 issued now, the images it judged, and the
    public key, as files."""
    report = VerdictSigner(KEY).sign({
        "decision": "approve", "reasons": [], "application": "A-1",
        "issued_at": int(time.time()), "document": {"fields": {"surname": "BERG"}},
        "images": {"document": image_digest(b"doc"), "selfie": image_digest(b"selfie")}})
    paths = {name: tmp_path / name for name in ("report.json", "key", "doc", "selfie")}
    paths["report.json"].write_text(json.dumps(report))
    paths["key"].write_text(public_key_text(VerdictSigner(KEY).public_key))
    paths["doc"].write_bytes(b"doc")
    paths["selfie"].write_bytes(b"selfie")
    return paths


def check(files, *options: str) -> int:
    return main(["verdict", "check", "--public-key", str(files["key"]), *options,
                 str(files["report.json"])])


def test_a_report_of_the_expected_application_and_images_checks_and_prints_it(files, capsys):
    assert check(files, "--application", "A-1", "--document", str(files["doc"]),
                 "--selfie", str(files["selfie"])) == 0
    assert json.loads(capsys.readouterr().out)["document"]["fields"]["surname"] == "BERG"


@pytest.mark.parametrize(("options", "says"), [
    (("--application", "A-2"), "another application"),
    (("--application", ""), "another application"),
    (("--application", "A-1", "--document", "doc", "--selfie", "doc"), "other images"),
], ids=["other-application", "no-application", "other-selfie"])
def test_a_report_of_another_application_or_images_fails_with_its_reason(files, capsys,
                                                                         options, says):
    options = tuple(str(files[o]) if o in files else o for o in options)
    assert check(files, *options) == 1
    assert says in capsys.readouterr().err


def test_an_edited_identity_or_an_old_report_fails_and_an_audit_takes_any_age(files, capsys):
    report = json.loads(files["report.json"].read_text())
    report["document"]["fields"]["surname"] = "MULE"
    files["report.json"].write_text(json.dumps(report))
    assert check(files, "--application", "A-1") == 1
    assert "differs from what was signed" in capsys.readouterr().err
    old = VerdictSigner(KEY).sign({"application": "A-1", "issued_at": int(time.time()) - 400})
    files["report.json"].write_text(json.dumps(old))
    assert check(files, "--application", "A-1") == 1
    assert "older than 300 s" in capsys.readouterr().err
    assert check(files, "--application", "A-1", "--max-age", "0") == 0  # an audit


def test_the_public_key_printed_is_the_one_that_checks(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KYC_TOKEN_KEY", base64.b64encode(KEY).decode())
    assert main(["verdict", "public-key"]) == 0
    assert capsys.readouterr().out.strip() == public_key_text(VerdictSigner(KEY).public_key)
