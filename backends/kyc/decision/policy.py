"""The KYC policy: what the models found -> approve / review / reject, with reasons.

Pure code. Every threshold is a ``kyc_decision`` config parameter
(:class:`DecisionSettings`); the face-match threshold is ``face_embedding``'s own
``match_threshold`` (it belongs to the weights). Reasons are stable snake_case
codes; each is a ``reject`` or a ``review`` reason:

reject: ``face_mismatch`` (both faces found, cosine below the threshold),
``liveness_failed`` (a genuine token that says not live), ``liveness_token_invalid``
(altered, made with another key, not a token, or bound to another application),
``liveness_token_reused`` (a genuine token already spent by a verification:
kyc.decision.ledger), ``selfie_not_live_person`` (the
selfie is not the face the liveness session saw), ``mrz_check_failed``,
``document_expired``, ``underage``, ``high_fraud_score``.

review: ``no_face_in_document``, ``no_face_in_selfie``, ``multiple_faces_in_selfie``,
``liveness_missing`` (no token: never approve without liveness),
``liveness_token_expired``, ``liveness_without_passive_pad`` (a live token whose
session had no passive anti-spoofing model: see below), ``mrz_not_found``,
``visual_zone_mismatch`` (the visual zone was read but does not show the MRZ's
surname or document number), ``elevated_fraud_score``.

Lower assurance without passive PAD (``approve_without_passive_pad``, false by
default): the active challenge and the relief check stop a photo however it is
presented (print, screen, curved print, a warp of one photo), but not a replay of a
recording that happens to hold the challenge's moves, a mask with a face's relief,
or frames made by software (injection); a passive PAD model, evaluated to ISO/IEC
30107-3, is what the field adds against those. Without one, this policy does not
approve unattended: such a customer goes to review. An operator who accepts those
risks sets the parameter (SECURITY.md says what it lets through).

The decision is ``reject`` when any reject reason holds, else ``review`` when any
review reason holds, else ``approve``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from kyc.decision.features import age_years
from kyc.document.visual import shows_mrz_fields
from kyc.pipeline.seal import SEAL_MAX_AGE_S

REJECT = ("face_mismatch", "liveness_failed", "liveness_token_invalid", "liveness_token_reused",
          "selfie_not_live_person", "mrz_check_failed", "document_expired", "underage",
          "high_fraud_score")
REVIEW = ("no_face_in_document", "no_face_in_selfie", "multiple_faces_in_selfie",
          "liveness_missing", "liveness_token_expired", "liveness_without_passive_pad",
          "mrz_not_found", "visual_zone_mismatch", "elevated_fraud_score")
REASONS = REJECT + REVIEW


@dataclass(frozen=True)
class DecisionSettings:
    """``kyc_decision`` parameters (config ``parameters``; defaults here only)."""

    embedding_model: str = "face_embedding"  # its match_threshold is the face threshold
    antifraud_model: str = "antifraud"
    min_age: int = 18
    fraud_review_threshold: float = 0.7
    fraud_reject_threshold: float = 0.95
    check_visual_zone: bool = True
    # A live token from a session without passive PAD approves (true) or goes to
    # review (false): see the module docstring.
    approve_without_passive_pad: bool = False
    # kyc_intake's seal is refused past this age (kyc.pipeline.seal)
    seal_max_age_s: float = SEAL_MAX_AGE_S
    # a token whose START named no application (kyc_application) is refused (true) or
    # taken, once (false: clients of the contract that name none keep working)
    require_bound_token: bool = False


@dataclass(frozen=True)
class LivenessEvidence:
    """What the LIVENESS_TOKEN said (``provided``: non-empty bytes were sent)."""

    provided: bool
    valid: bool = False
    expired: bool = False
    reused: bool = False  # genuine, but spent by an earlier verification
    live: bool = False
    passive_pad: bool = False  # a passive anti-spoofing model ran in the session
    score: float = -1.0
    selfie_similarity: float | None = None  # cosine of the selfie and the token's face
    problem: str | None = None  # why a token was refused (no token content)


@dataclass(frozen=True)
class Findings:
    face_match_score: float  # -1 when a face is missing
    document_face_found: bool
    selfie_face_found: bool
    selfie_faces: int
    liveness: LivenessEvidence
    document: Mapping[str, Any]  # document_ocr's DOCUMENT
    visual_lines: Sequence[str]  # the text lines read outside the MRZ
    fraud_score: float


def visual_zone_consistent(document: Mapping[str, Any], visual_lines: Sequence[str]
                           ) -> bool | None:
    """Whether the visual zone shows the MRZ's surname and document number; None when
    there is nothing to compare (no MRZ fields, or no visual text)."""
    return shows_mrz_fields(document, visual_lines)


def decide(findings: Findings, settings: DecisionSettings, match_threshold: float,
           today: date) -> tuple[str, list[str], dict[str, Any]]:
    """(decision, reasons in REASONS order, figures behind them)."""
    reasons: set[str] = set()
    f = findings
    if not f.document_face_found:
        reasons.add("no_face_in_document")
    if not f.selfie_face_found:
        reasons.add("no_face_in_selfie")
    if f.selfie_faces > 1:
        reasons.add("multiple_faces_in_selfie")
    if f.document_face_found and f.selfie_face_found and f.face_match_score < match_threshold:
        reasons.add("face_mismatch")
    live = f.liveness
    if not live.provided:
        reasons.add("liveness_missing")
    elif live.expired:
        reasons.add("liveness_token_expired")
    elif live.reused:
        reasons.add("liveness_token_reused")
    elif not live.valid:
        reasons.add("liveness_token_invalid")
    else:
        if not live.live:
            reasons.add("liveness_failed")
        elif not live.passive_pad and not settings.approve_without_passive_pad:
            reasons.add("liveness_without_passive_pad")
        if f.selfie_face_found and (live.selfie_similarity is None
                                    or live.selfie_similarity < match_threshold):
            reasons.add("selfie_not_live_person")
    mrz = f.document.get("mrz")
    fields = f.document.get("fields") or {}
    if mrz is None:
        reasons.add("mrz_not_found")
    elif mrz.get("valid") is not True:
        reasons.add("mrz_check_failed")
    if f.document.get("expired") is True:
        reasons.add("document_expired")
    age = age_years(fields.get("birth_date"), today) if fields.get("birth_date") else None
    if age is not None and age < settings.min_age:
        reasons.add("underage")
    consistent = (visual_zone_consistent(f.document, f.visual_lines)
                  if settings.check_visual_zone else None)
    if consistent is False:
        reasons.add("visual_zone_mismatch")
    if f.fraud_score >= settings.fraud_reject_threshold:
        reasons.add("high_fraud_score")
    elif f.fraud_score >= settings.fraud_review_threshold:
        reasons.add("elevated_fraud_score")
    ordered = [r for r in REASONS if r in reasons]
    if any(r in REJECT for r in ordered):
        decision = "reject"
    elif ordered:
        decision = "review"
    else:
        decision = "approve"
    figures = {"age": age, "visual_zone_consistent": consistent,
               "match_threshold": match_threshold, "min_age": settings.min_age,
               "fraud_review_threshold": settings.fraud_review_threshold,
               "fraud_reject_threshold": settings.fraud_reject_threshold}
    return decision, ordered, figures
