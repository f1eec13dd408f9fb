"""The KYC policy and the antifraud feature vector (pure code, no server)."""

from __future__ import annotations

import dataclasses
from datetime import date

import numpy as np
import pytest

from kyc.decision.features import FEATURES, Observation, age_years, vector
from kyc.decision.policy import (
    REASONS,
    REJECT,
    REVIEW,
    DecisionSettings,
    Findings,
    LivenessEvidence,
    decide,
    visual_zone_consistent,
)
from kyc.face.match import FaceThresholds

TODAY = date(2026, 11, 22)
THRESHOLD = 0.363
FACES = FaceThresholds(THRESHOLD, THRESHOLD)  # no review band: see test_review_band_*
DOCUMENT = {
    "mrz": {"format": "TD3", "lines": ["L1", "L2"], "valid": True,
            "checks": {"document_number": True, "birth_date": True, "expiry_date": True,
                       "optional_data": True, "composite": True}, "corrections": 1},
    "fields": {"surname": "VAN DER BERG", "given_names": "ANNA", "document_number": "X12O45",
               "birth_date": "1990-05-01", "expiry_date": "2030-01-01"},
    "expired": False,
}
LIVE = LivenessEvidence(provided=True, valid=True, live=True, passive_pad=True, score=0.97,
                        selfie_similarity=0.8)
GOOD = Findings(face_match_score=0.7, document_face_found=True, selfie_face_found=True,
                selfie_faces=1, liveness=LIVE, document=DOCUMENT,
                visual_lines=["PASSPORT", "Van der Berg", "No. X12045"], fraud_score=0.1)


def run(**changes):
    findings = dataclasses.replace(GOOD, **changes)
    return decide(findings, DecisionSettings(), FACES, TODAY)


def not_valid(failing=(), problems=None, misread=()) -> dict:
    """DOCUMENT with an MRZ that is not valid: ``failing`` checks (their problems unless
    ``problems`` says otherwise) and ``misread`` as kyc.document.mrz reports them."""
    checks = {**DOCUMENT["mrz"]["checks"], **dict.fromkeys(failing, False)}
    if problems is None:
        problems = [f"{name}_check_failed" for name in failing]
    mrz = {**DOCUMENT["mrz"], "valid": False, "checks": checks, "problems": list(problems),
           "misread": list(misread)}
    return {**DOCUMENT, "mrz": mrz}


NUMBER_MISREAD = not_valid(["document_number", "composite"],
                           misread=["document_number", "composite"])


def test_everything_in_order_is_approved():
    decision, reasons, figures = run()
    assert (decision, reasons) == ("approve", [])
    assert figures["age"] == 36 and figures["visual_zone_consistent"] is True


def test_a_live_session_without_passive_pad_goes_to_review_unless_the_operator_accepts_it():
    active_only = dataclasses.replace(GOOD, liveness=dataclasses.replace(LIVE, passive_pad=False))
    assert decide(active_only, DecisionSettings(), FACES, TODAY)[:2] == (
        "review", ["liveness_without_passive_pad"])
    accepting = DecisionSettings(approve_without_passive_pad=True)
    assert decide(active_only, accepting, FACES, TODAY)[:2] == ("approve", [])
    # a failed session is rejected whatever passive PAD did
    failed = dataclasses.replace(GOOD, liveness=dataclasses.replace(LIVE, live=False,
                                                                    passive_pad=False))
    assert decide(failed, DecisionSettings(), FACES, TODAY)[1] == ["liveness_failed"]


@pytest.mark.parametrize(("changes", "decision", "reason"), [
    ({"face_match_score": 0.2}, "reject", "face_mismatch"),
    ({"liveness": LivenessEvidence(provided=False)}, "review", "liveness_missing"),
    ({"liveness": LivenessEvidence(provided=True, problem="altered")}, "reject",
     "liveness_token_invalid"),
    ({"liveness": LivenessEvidence(provided=True, expired=True)}, "review",
     "liveness_token_expired"),
    ({"liveness": dataclasses.replace(LIVE, live=False)}, "reject", "liveness_failed"),
    ({"liveness": dataclasses.replace(LIVE, selfie_similarity=0.1)}, "reject",
     "selfie_not_live_person"),
    ({"document_face_found": False, "face_match_score": -1.0}, "review", "no_face_in_document"),
    ({"selfie_faces": 2}, "review", "multiple_faces_in_selfie"),
    ({"document": {**DOCUMENT, "mrz": None}}, "review", "mrz_not_found"),
    ({"document": {**DOCUMENT, "mrz": {**DOCUMENT["mrz"], "valid": False}}}, "reject",
     "mrz_check_failed"),
    ({"document": NUMBER_MISREAD}, "review", "mrz_misread"),
    ({"document": {**DOCUMENT, "expired": True}}, "reject", "document_expired"),
    ({"document": {**DOCUMENT, "fields": {**DOCUMENT["fields"], "birth_date": "2012-01-01"}}},
     "reject", "underage"),
    ({"visual_lines": ["PASSPORT", "SMITH", "No. X12045"]}, "review", "visual_zone_mismatch"),
    ({"fraud_score": 0.8}, "review", "elevated_fraud_score"),
    ({"fraud_score": 0.97}, "reject", "high_fraud_score"),
])
def test_each_finding_gives_its_reason_and_decision(changes, decision, reason):
    got, reasons, _ = run(**changes)
    assert reason in reasons and got == decision, (got, reasons)
    assert reasons == [r for r in REASONS if r in reasons]


def test_a_reject_reason_wins_over_review_reasons_and_the_lists_are_disjoint():
    decision, reasons, _ = run(face_match_score=0.1, liveness=LivenessEvidence(provided=False))
    assert decision == "reject" and reasons == ["face_mismatch", "liveness_missing"]
    assert not set(REJECT) & set(REVIEW)


def test_the_visual_zone_check_reads_through_ocr_confusions_and_says_nothing_without_text():
    assert visual_zone_consistent(DOCUMENT, ["VANDERBERG X1 2045"]) is True
    assert visual_zone_consistent(DOCUMENT, []) is None
    assert visual_zone_consistent({"mrz": None, "fields": {}}, ["anything"]) is None


SURNAME_ONLY = ["PASSPORT", "Van der Berg"]
NUMBER_ONLY = ["PASSPORT", "No. X12045"]


@pytest.mark.parametrize(("lines", "fields", "zone", "reasons"), [
    (["VAN DER BERG", "X12O45"], {}, "agrees", []),
    (["vanderberg x1-2045 anna"], {}, "agrees", []),  # case, spaces, O/0 and I/1 aside
    ([], {}, "unread", ["visual_zone_unreadable"]),  # an MRZ alone on the page
    (["  ", "<<<", "."], {}, "unread", ["visual_zone_unreadable"]),
    (SURNAME_ONLY, {}, "differs", ["visual_zone_mismatch"]),
    (NUMBER_ONLY, {}, "differs", ["visual_zone_mismatch"]),
    (["PASSPORT", "SMITH", "No. X12045"], {}, "differs", ["visual_zone_mismatch"]),
    (["VAN DER BERG", "X12046"], {}, "differs", ["visual_zone_mismatch"]),
    (NUMBER_ONLY, {"surname": ""}, "differs", ["visual_zone_mismatch"]),  # an MRZ without
    (SURNAME_ONLY, {"document_number": None}, "differs", ["visual_zone_mismatch"]),  # them
], ids=["agrees", "confusions", "no-text", "no-letters", "no-number", "no-surname", "other",
        "other-number", "mrz-no-surname", "mrz-no-number"])
def test_the_visual_zone_must_show_the_mrzs_surname_and_number_to_approve(lines, fields,
                                                                            zone, reasons):
    document = {**DOCUMENT, "fields": {**DOCUMENT["fields"], **fields}}
    decision, got, figures = run(visual_lines=lines, document=document)
    assert (got, figures["visual_zone"]) == (reasons, zone)
    assert decision == ("approve" if not reasons else "review")
    assert figures["visual_zone_consistent"] is {"agrees": True, "differs": False}.get(zone)


def test_without_an_mrz_or_with_the_check_off_the_visual_zone_gives_no_reason():
    decision, reasons, figures = run(document={**DOCUMENT, "mrz": None}, visual_lines=[])
    assert reasons == ["mrz_not_found"] and figures["visual_zone"] == "no_mrz"
    off = dataclasses.replace(GOOD, visual_lines=[])
    decision, reasons, figures = decide(off, DecisionSettings(check_visual_zone=False),
                                        FACES, TODAY)
    assert (decision, reasons, figures["visual_zone"]) == ("approve", [], "not_checked")


@pytest.mark.parametrize(("document", "reasons"), [
    (NUMBER_MISREAD, ["mrz_misread"]),
    (not_valid(problems=["name_unsure"], misread=["name"]), ["mrz_misread"]),
    (not_valid(["birth_date", "composite"], problems=[
        "birth_date_check_failed", "composite_check_failed", "name_unsure"],
        misread=["birth_date", "composite", "name"]), ["mrz_misread"]),
    # a failing check read with confidence is an edit, whatever else was unsure
    (not_valid(["document_number", "composite"]), ["mrz_check_failed"]),
    (not_valid(["document_number", "composite"], misread=["composite"]), ["mrz_check_failed"]),
    (not_valid(["document_number", "composite"], problems=[
        "document_number_check_failed", "composite_check_failed", "name_unsure"],
        misread=["document_number", "composite"]), ["mrz_check_failed"]),  # "name" not in it
    (not_valid(["birth_date"], problems=["birth_date_check_failed", "birth_date_invalid"],
               misread=["birth_date"]), ["mrz_check_failed"]),  # an impossible date
    (not_valid(problems=["nationality_unknown"], misread=["name"]), ["mrz_check_failed"]),
    (not_valid(["composite"], problems=[], misread=["composite"]), ["mrz_check_failed"]),
    # a check failing but not among the problems is not explained by them
    (not_valid(["composite"], problems=["name_unsure"], misread=["name"]), ["mrz_check_failed"]),
    ({**DOCUMENT, "mrz": {**NUMBER_MISREAD["mrz"], "misread": None}}, ["mrz_check_failed"]),
    ({**DOCUMENT, "mrz": {**NUMBER_MISREAD["mrz"], "problems": None}}, ["mrz_check_failed"]),
    ({**DOCUMENT, "mrz": {k: v for k, v in NUMBER_MISREAD["mrz"].items() if k != "misread"}},
     ["mrz_check_failed"]),  # a DOCUMENT from before issue 45
    ({**DOCUMENT, "mrz": {**NUMBER_MISREAD["mrz"], "valid": True}}, []),
], ids=["number-misread", "name-unsure", "date-and-name-unsure", "checks-sure",
        "number-sure-composite-unsure", "name-unsure-not-in-misread", "impossible-date",
        "unknown-state", "no-problems", "check-not-a-problem", "misread-null", "problems-null",
        "no-misread-key", "valid"])
def test_an_mrz_not_valid_only_where_the_reader_was_unsure_asks_for_another_photo(document,
                                                                                    reasons):
    decision, got, _ = run(document=document)
    assert got == reasons
    assert decision == ("approve" if not reasons else
                        "review" if reasons == ["mrz_misread"] else "reject")


def test_a_misread_mrz_beside_a_reject_reason_is_rejected():
    decision, reasons, _ = run(document=NUMBER_MISREAD, face_match_score=0.1)
    assert (decision, reasons) == ("reject", ["face_mismatch", "mrz_misread"])


# -- every threshold at its boundary: the value itself and the nearest one either side --
def _birthday(years_ago: int, days: int = 0) -> dict:
    born = TODAY.replace(year=TODAY.year - years_ago).toordinal() + days
    fields = {**DOCUMENT["fields"], "birth_date": date.fromordinal(born).isoformat()}
    return {**DOCUMENT, "fields": fields}


@pytest.mark.parametrize(("changes", "reasons"), [
    ({"document": _birthday(18)}, []),  # 18 today
    ({"document": _birthday(18, days=1)}, ["underage"]),  # 18 tomorrow
    ({"document": _birthday(18, days=-1)}, []),
    ({"fraud_score": 0.95}, ["high_fraud_score"]),
    ({"fraud_score": float(np.nextafter(0.95, 0))}, ["elevated_fraud_score"]),
    ({"fraud_score": 0.7}, ["elevated_fraud_score"]),
    ({"fraud_score": float(np.nextafter(0.7, 0))}, []),
    ({"face_match_score": THRESHOLD}, []),
    ({"face_match_score": float(np.nextafter(THRESHOLD, 0))}, ["face_mismatch"]),
    ({"liveness": dataclasses.replace(LIVE, selfie_similarity=THRESHOLD)}, []),
    ({"liveness": dataclasses.replace(LIVE, selfie_similarity=float(
        np.nextafter(THRESHOLD, 0)))}, ["selfie_not_live_person"]),
    ({"liveness": dataclasses.replace(LIVE, selfie_similarity=None)},
     ["selfie_not_live_person"]),  # a token without a face
    ({"selfie_faces": 1}, []),
    ({"selfie_faces": 2}, ["multiple_faces_in_selfie"]),
], ids=["age-18", "age-17", "age-18-and-a-day", "fraud-reject", "fraud-below-reject",
        "fraud-review", "fraud-below-review", "match-at", "match-below", "live-match-at",
        "live-match-below", "live-no-face", "one-face", "two-faces"])
def test_each_threshold_holds_at_its_boundary(changes, reasons):
    assert run(**changes)[1] == reasons


def test_ages_count_whole_years_up_to_the_birthday():
    assert age_years("2008-11-22", TODAY) == 18
    assert age_years("2008-11-23", TODAY) == 17
    assert age_years(None, TODAY) is None


def test_the_feature_vector_follows_the_pinned_order_with_stated_unknowns():
    obs = Observation(0.7, True, True, 1, 0.97, True, 0.8, DOCUMENT, 0.93,
                      {"sharpness": 1000.0}, {"sharpness": 200.0})
    values = dict(zip(FEATURES, vector(obs, TODAY), strict=True))
    assert values["mrz_valid"] == 1 and values["mrz_corrections"] == 1
    assert values["age_years"] == 36 and values["years_to_expiry"] == pytest.approx(3.11, 0.01)
    assert values["liveness_mismatch"] == 0 and values["selfie_sharpness"] == pytest.approx(
        np.log1p(1000.0), 1e-5)
    blank = Observation(-1.0, False, False, 0, -1.0, False, -1.0,
                        {"mrz": None, "fields": {}, "expired": None}, 0.0, {}, {})
    values = dict(zip(FEATURES, vector(blank, TODAY), strict=True))
    assert values["mrz_found"] == 0 and values["age_years"] == 0 and values["liveness_match"] == -1
    assert np.isfinite(vector(blank, TODAY)).all()


def test_the_feature_vector_reads_a_misread_mrz_as_any_mrz_not_valid():
    obs = Observation(0.7, True, True, 1, 0.97, True, 0.8, NUMBER_MISREAD, 0.93, {}, {})
    values = dict(zip(FEATURES, vector(obs, TODAY), strict=True))
    assert (values["mrz_found"], values["mrz_valid"], values["mrz_checks_failed"]) == (1, 0, 2)
    assert np.isfinite(vector(obs, TODAY)).all()


def test_the_manifest_pins_the_same_features():
    from kyc_tools.assets.manifest import load_manifest

    assert tuple(load_manifest().trained["antifraud"]["features"]) == FEATURES


BAND = FaceThresholds(match=0.47, review=0.34)


@pytest.mark.parametrize(("score", "decision", "reasons"), [
    (0.47, "approve", []),
    (float(np.nextafter(0.47, 0)), "review", ["face_match_uncertain"]),
    (0.34, "review", ["face_match_uncertain"]),
    (float(np.nextafter(0.34, 0)), "reject", ["face_mismatch"]),
], ids=["at-match", "below-match", "at-review", "below-review"])
def test_review_band_sends_a_score_between_the_thresholds_to_a_person(score, decision,
                                                                       reasons):
    findings = dataclasses.replace(GOOD, face_match_score=score)
    assert decide(findings, DecisionSettings(), BAND, TODAY)[:2] == (decision, reasons)


def test_review_band_leaves_the_selfie_against_the_live_face_at_the_match_threshold():
    # the selfie and the session's face are seconds apart: no band for them
    live = dataclasses.replace(LIVE, selfie_similarity=0.40)
    findings = dataclasses.replace(GOOD, liveness=live)
    assert decide(findings, DecisionSettings(), BAND, TODAY)[:2] == (
        "reject", ["selfie_not_live_person"])


@pytest.mark.parametrize(("parameters", "expected"), [
    ({"match_threshold": "0.47", "review_threshold": "0.34"}, FaceThresholds(0.47, 0.34)),
    ({"match_threshold": "0.47"}, FaceThresholds(0.47, 0.47)),
    ({"match_threshold": "0.47", "review_threshold": ""}, FaceThresholds(0.47, 0.47)),
])
def test_face_thresholds_read_from_the_models_parameters(parameters, expected):
    assert FaceThresholds.from_parameters(parameters) == expected


def test_face_thresholds_refuse_a_review_threshold_above_the_match_threshold():
    with pytest.raises(ValueError, match=r"review_threshold 0\.5 is above match_threshold"):
        FaceThresholds.from_parameters({"match_threshold": "0.47", "review_threshold": "0.5"})
