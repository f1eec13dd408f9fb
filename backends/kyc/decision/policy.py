"""The KYC policy: what the models found -> approve / review / reject, with reasons.

Pure code. Every threshold is a ``kyc_decision`` config parameter
(:class:`DecisionSettings`); the face-match thresholds are ``face_embedding``'s own
(:mod:`kyc.face.match`: they belong to the weights): at or above ``match_threshold`` the
faces match, below ``review_threshold`` they do not, between a person looks. The reason
codes, each a ``reject`` or a ``review`` reason, with what each means, are declared once
in :mod:`kyc.reasons` (docs/reason-codes.md is generated from it); :func:`decide` refers
to them there.

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
from kyc.document.mrz_sure import only_misread
from kyc.document.visual import VisualZone, compare
from kyc.face.match import FaceThresholds
from kyc.pipeline.seal import SEAL_MAX_AGE_S
from kyc.reasons import (
    DECISION_REASONS,
    DOCUMENT_EXPIRED,
    ELEVATED_FRAUD_SCORE,
    FACE_MATCH_UNCERTAIN,
    FACE_MISMATCH,
    HIGH_FRAUD_SCORE,
    LIVENESS_FAILED,
    LIVENESS_MISSING,
    LIVENESS_TOKEN_EXPIRED,
    LIVENESS_TOKEN_INVALID,
    LIVENESS_TOKEN_REUSED,
    LIVENESS_WITHOUT_PASSIVE_PAD,
    MRZ_CHECK_FAILED,
    MRZ_MISREAD,
    MRZ_NOT_FOUND,
    MULTIPLE_FACES_IN_SELFIE,
    NO_FACE_IN_DOCUMENT,
    NO_FACE_IN_SELFIE,
    SELFIE_NOT_LIVE_PERSON,
    UNDERAGE,
    VISUAL_ZONE_MISMATCH,
    VISUAL_ZONE_UNREADABLE,
    Outcome,
    Reason,
)

# The codes (strings, as REPORT carries them), from kyc.reasons: in REPORT's order.
REJECT = tuple(r.code for r in DECISION_REASONS if r.outcome is Outcome.REJECT)
REVIEW = tuple(r.code for r in DECISION_REASONS if r.outcome is Outcome.REVIEW)
REASONS = REJECT + REVIEW


@dataclass(frozen=True)
class DecisionSettings:
    """``kyc_decision`` parameters (config ``parameters``; defaults here only)."""

    embedding_model: str = "face_embedding"  # its thresholds are the face thresholds
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
    """Whether the visual zone shows the MRZ's surname and document number
    (kyc.document.visual); None when it cannot say: no MRZ, or no text outside it."""
    return CONSISTENT[compare(document, visual_lines)]


CONSISTENT = {VisualZone.AGREES: True, VisualZone.DIFFERS: False, VisualZone.UNREAD: None,
              VisualZone.NO_MRZ: None}
VISUAL_REASON = {VisualZone.DIFFERS: VISUAL_ZONE_MISMATCH,
                 VisualZone.UNREAD: VISUAL_ZONE_UNREADABLE}


def decide(findings: Findings, settings: DecisionSettings, faces: FaceThresholds,
           today: date) -> tuple[str, list[str], dict[str, Any]]:
    """(decision, reasons in REASONS order, figures behind them); ``faces``: the embedding
    model's thresholds."""
    held: set[Reason] = set()
    f = findings
    if not f.document_face_found:
        held.add(NO_FACE_IN_DOCUMENT)
    if not f.selfie_face_found:
        held.add(NO_FACE_IN_SELFIE)
    if f.selfie_faces > 1:
        held.add(MULTIPLE_FACES_IN_SELFIE)
    if f.document_face_found and f.selfie_face_found and f.face_match_score < faces.match:
        held.add(FACE_MISMATCH if f.face_match_score < faces.review else FACE_MATCH_UNCERTAIN)
    live = f.liveness
    if not live.provided:
        held.add(LIVENESS_MISSING)
    elif live.expired:
        held.add(LIVENESS_TOKEN_EXPIRED)
    elif live.reused:
        held.add(LIVENESS_TOKEN_REUSED)
    elif not live.valid:
        held.add(LIVENESS_TOKEN_INVALID)
    else:
        if not live.live:
            held.add(LIVENESS_FAILED)
        elif not live.passive_pad and not settings.approve_without_passive_pad:
            held.add(LIVENESS_WITHOUT_PASSIVE_PAD)
        if f.selfie_face_found and (live.selfie_similarity is None
                                    or live.selfie_similarity < faces.match):
            held.add(SELFIE_NOT_LIVE_PERSON)
    mrz = f.document.get("mrz")
    fields = f.document.get("fields") or {}
    if mrz is None:
        held.add(MRZ_NOT_FOUND)
    elif mrz.get("valid") is not True:
        # not valid only where the reader was unsure (a blurred photo): another photo
        held.add(MRZ_MISREAD if only_misread(mrz) else MRZ_CHECK_FAILED)
    if f.document.get("expired") is True:
        held.add(DOCUMENT_EXPIRED)
    age = age_years(fields.get("birth_date"), today) if fields.get("birth_date") else None
    if age is not None and age < settings.min_age:
        held.add(UNDERAGE)
    zone = compare(f.document, f.visual_lines) if settings.check_visual_zone else None
    if zone in VISUAL_REASON:
        held.add(VISUAL_REASON[zone])
    if f.fraud_score >= settings.fraud_reject_threshold:
        held.add(HIGH_FRAUD_SCORE)
    elif f.fraud_score >= settings.fraud_review_threshold:
        held.add(ELEVATED_FRAUD_SCORE)
    ordered = [r for r in DECISION_REASONS if r in held]
    if any(r.outcome is Outcome.REJECT for r in ordered):
        decision = Outcome.REJECT
    elif ordered:
        decision = Outcome.REVIEW
    else:
        decision = Outcome.APPROVE
    figures = {"age": age, "visual_zone": zone.value if zone else "not_checked",
               "visual_zone_consistent": CONSISTENT[zone] if zone else None,
               "match_threshold": faces.match, "review_threshold": faces.review,
               "min_age": settings.min_age,
               "fraud_review_threshold": settings.fraud_review_threshold,
               "fraud_reject_threshold": settings.fraud_reject_threshold}
    return decision.value, [r.code for r in ordered], figures
