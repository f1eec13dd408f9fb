"""The policy and the visual-zone rule at their edges (make mutate found each of these
unheld by the other tests: docs/mutation-testing.md)."""

from __future__ import annotations

import dataclasses

from decision_cases import DOCUMENT, TODAY
from kyc.decision.policy import DecisionSettings, Findings, LivenessEvidence, decide
from kyc.document.visual import VisualZone, compare, squash, wanted_values
from kyc.face.match import FaceThresholds

THRESHOLD = 0.363
FACES = FaceThresholds(THRESHOLD, THRESHOLD)  # no review band: see test_review_band_*
GOOD = Findings(face_match_score=0.7, document_face_found=True, selfie_face_found=True,
                selfie_faces=1,
                liveness=LivenessEvidence(provided=True, valid=True, live=True, passive_pad=True,
                                          score=0.97, selfie_similarity=0.8),
                document=DOCUMENT, visual_lines=["BERG", "X12045"], fraud_score=0.1)


def test_a_selfie_without_a_face_is_reviewed_for_that_reason_alone():
    no_face = dataclasses.replace(GOOD, selfie_face_found=False, selfie_faces=0,
                                  face_match_score=-1.0)
    assert decide(no_face, DecisionSettings(), FACES, TODAY)[:2] == (
        "review", ["no_face_in_selfie"])


def test_the_figures_of_a_decision_name_every_threshold_it_applied():
    settings = DecisionSettings(min_age=21, fraud_review_threshold=0.6,
                                fraud_reject_threshold=0.9)
    assert decide(GOOD, settings, FACES, TODAY)[2] == {
        "age": 36, "visual_zone": "agrees", "visual_zone_consistent": True,
        "match_threshold": THRESHOLD, "review_threshold": THRESHOLD, "min_age": 21,
        "fraud_review_threshold": 0.6,
        "fraud_reject_threshold": 0.9}


def test_the_visual_zone_reads_i_as_1_and_o_as_0_and_nothing_else_alike():
    assert squash("Ii Oo-01 l<") == "110001L"
    document = {**DOCUMENT, "fields": {**DOCUMENT["fields"], "surname": "IVANOVA",
                                       "document_number": "1O2I"}}
    assert compare(document, ["1VAN0VA", "I021"]) is VisualZone.AGREES
    assert compare(document, ["LVANOVA", "I021"]) is VisualZone.DIFFERS


def test_the_values_the_visual_zone_must_show_are_the_mrzs_surname_and_number_squashed():
    fields = {"surname": "van der Berg", "document_number": "X12O45", "given_names": "ANNA"}
    assert wanted_values({"fields": fields}) == ["VANDERBERG", "X12045"]
    assert wanted_values({"fields": {**fields, "surname": ""}}) == ["X12045"]
    assert wanted_values({"fields": None}) == wanted_values({}) == []
