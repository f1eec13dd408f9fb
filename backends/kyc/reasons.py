"""The reason codes the pipeline gives, declared once, with what each means for the
operator and what the person at the capture page is told of it.

Two lists of stable snake_case codes, both part of what clients see (never rename one):

- :data:`DECISION_REASONS`: ``kyc_decision``'s, in REPORT ``reasons`` (and the signed
  verdict). Each is a :attr:`Outcome.REJECT` or an :attr:`Outcome.REVIEW` reason: the
  decision is ``reject`` when any reject reason holds, else ``review`` when any review
  reason holds, else ``approve`` (kyc.decision.policy). REPORT lists them in this order.
- :data:`LIVENESS_REASONS`: the liveness verdict's, in ``liveness_sequence``'s STATUS
  ``reasons`` at END: each names the check of kyc.liveness.session.judge that failed.

The person is never told a code, a score or which check saw what (those guide an
attacker): each code is told as one of a few coarse reasons (:data:`TOLD`, words shown
by the capture page, kyc_tools.web.words), or as nothing more than the decision.

Everything else follows from here: the tuples of kyc.decision.policy, the liveness
verdict's codes (kyc.liveness.session.REASONS), the capture page's words and the page
``docs/reason-codes.md`` (``kyc docs reasons`` writes it; a unit test fails when the
committed page differs). To add a code: docs/vocabularies.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class Told:
    """A coarse reason: what the person is told, in plain words; the page keeps its code
    beside the words (for the app team)."""

    code: str
    text: str


FACE_NOT_MATCHED = Told("face_not_matched", "The face did not match the document.")
FACE_NOT_SEEN = Told("face_not_seen", "We could not see one face clearly, in your photo or "
                                      "on the document.")
LIVENESS_NOT_CONFIRMED = Told("liveness_not_confirmed",
                              "The camera check could not confirm a live person.")
MOVES_NOT_SEEN = Told("moves_not_seen", "The head turns asked were not seen, in that order, "
                                        "in the time allowed.")
PICTURES_UNCLEAR = Told("pictures_unclear", "We could not see your face alone and sharp: hold "
                                            "the phone still, in good light.")
DOCUMENT_UNREADABLE = Told("document_unreadable", "The document could not be read.")
DOCUMENT_PHOTO_UNCLEAR = Told("document_photo_unclear",
                              "We could not read your document clearly: please take another "
                              "photo, flat, in good light, without glare.")
DOCUMENT_NOT_ACCEPTED = Told("document_not_accepted", "This document cannot be accepted (its "
                                                      "validity, or the holder's age).")
# also the words of a code the page does not know (one added later)
PERSON_REVIEWS = Told("person_reviews", "A person will look at your application.")

TOLD: tuple[Told, ...] = (FACE_NOT_MATCHED, FACE_NOT_SEEN, LIVENESS_NOT_CONFIRMED,
                          MOVES_NOT_SEEN, PICTURES_UNCLEAR, DOCUMENT_UNREADABLE,
                          DOCUMENT_PHOTO_UNCLEAR, DOCUMENT_NOT_ACCEPTED, PERSON_REVIEWS)


class Outcome(Enum):
    """``kyc_decision``'s DECISION (its value is the wire string)."""

    APPROVE = "approve"
    REVIEW = "review"
    REJECT = "reject"


# What each decision means, and what the person is told of it.
OUTCOME_MEANS = {
    Outcome.APPROVE: "no reason holds",
    Outcome.REVIEW: "a review reason holds and no reject reason: a person looks at the case",
    Outcome.REJECT: "a reject reason holds",
}
OUTCOME_TOLD = {
    Outcome.APPROVE: "You are verified.",
    Outcome.REVIEW: "We need a person to look at your documents. We will contact you.",
    Outcome.REJECT: "We could not verify you.",
}


@dataclass(frozen=True)
class Reason:
    """A reason code of ``kyc_decision``."""

    code: str
    outcome: Outcome  # REJECT or REVIEW
    means: str  # for the operator
    told: Told | None  # None: the person is told no more than the decision


# In the order REPORT lists them: the reject reasons, then the review reasons.
FACE_MISMATCH = Reason(
    "face_mismatch", Outcome.REJECT,
    "both faces were found and their cosine similarity is below `face_embedding`'s "
    "`review_threshold`: surely two people (no band configured: below `match_threshold`)",
    FACE_NOT_MATCHED)
LIVENESS_FAILED = Reason(
    "liveness_failed", Outcome.REJECT,
    "a genuine liveness token that says the session was not live (its STATUS `reasons` "
    "said why)", LIVENESS_NOT_CONFIRMED)
LIVENESS_TOKEN_INVALID = Reason(
    "liveness_token_invalid", Outcome.REJECT,
    "the token was altered, made with another key, is not a token, or is bound to another "
    "application", LIVENESS_NOT_CONFIRMED)
LIVENESS_TOKEN_REUSED = Reason(
    "liveness_token_reused", Outcome.REJECT,
    "a genuine token already spent by an earlier verification (kyc.decision.ledger)",
    LIVENESS_NOT_CONFIRMED)
SELFIE_NOT_LIVE_PERSON = Reason(
    "selfie_not_live_person", Outcome.REJECT,
    "the selfie is not the face the liveness session saw (cosine below `match_threshold`, "
    "or the token carries no face)", FACE_NOT_MATCHED)
MRZ_CHECK_FAILED = Reason(
    "mrz_check_failed", Outcome.REJECT,
    "the machine-readable zone was read but is not valid (`mrz.problems`): a check digit "
    "fails over no character the reader was in doubt of, a date is impossible or a state "
    "code names no state", DOCUMENT_UNREADABLE)
DOCUMENT_EXPIRED = Reason(
    "document_expired", Outcome.REJECT, "the document's expiry date has passed",
    DOCUMENT_NOT_ACCEPTED)
UNDERAGE = Reason(
    "underage", Outcome.REJECT, "the holder is younger than `min_age` (the MRZ's birth date)",
    DOCUMENT_NOT_ACCEPTED)
HIGH_FRAUD_SCORE = Reason(
    "high_fraud_score", Outcome.REJECT,
    "the `antifraud` score is at least `fraud_reject_threshold`", None)
NO_FACE_IN_DOCUMENT = Reason(
    "no_face_in_document", Outcome.REVIEW, "no face was found on the document image",
    FACE_NOT_SEEN)
NO_FACE_IN_SELFIE = Reason(
    "no_face_in_selfie", Outcome.REVIEW, "no face was found in the selfie", FACE_NOT_SEEN)
MULTIPLE_FACES_IN_SELFIE = Reason(
    "multiple_faces_in_selfie", Outcome.REVIEW, "the selfie shows more than one face",
    FACE_NOT_SEEN)
LIVENESS_MISSING = Reason(
    "liveness_missing", Outcome.REVIEW,
    "no liveness token was sent: a verification is never approved without liveness",
    LIVENESS_NOT_CONFIRMED)
LIVENESS_TOKEN_EXPIRED = Reason(
    "liveness_token_expired", Outcome.REVIEW,
    "a genuine token past its lifetime (`liveness_sequence`'s `token_ttl_s`), or issued "
    "before the ledger of spent tokens began (after a restart it cannot be known unspent)",
    LIVENESS_NOT_CONFIRMED)
LIVENESS_WITHOUT_PASSIVE_PAD = Reason(
    "liveness_without_passive_pad", Outcome.REVIEW,
    "a live token from a session without a passive anti-spoofing model: of lower assurance, "
    "so not approved unattended unless `approve_without_passive_pad` is set (SECURITY.md)",
    PERSON_REVIEWS)
MRZ_NOT_FOUND = Reason(
    "mrz_not_found", Outcome.REVIEW, "no machine-readable zone was found on the document",
    DOCUMENT_UNREADABLE)
MRZ_MISREAD = Reason(
    "mrz_misread", Outcome.REVIEW,
    "the machine-readable zone's check digits fail, or a letter of its name may be a filler, "
    "only over characters the reader was in doubt of (`mrz.misread`): likely a blurred "
    "photo, not an altered document; the person is asked for another photo",
    DOCUMENT_PHOTO_UNCLEAR)
VISUAL_ZONE_MISMATCH = Reason(
    "visual_zone_mismatch", Outcome.REVIEW,
    "text was read outside the MRZ but it does not show the MRZ's surname and document "
    "number (`check_visual_zone`)", DOCUMENT_UNREADABLE)
VISUAL_ZONE_UNREADABLE = Reason(
    "visual_zone_unreadable", Outcome.REVIEW,
    "no text was read outside the MRZ, so nothing printed on the page confirms it: a page "
    "with an MRZ alone is not approved (`check_visual_zone`)", DOCUMENT_UNREADABLE)
FACE_MATCH_UNCERTAIN = Reason(
    "face_match_uncertain", Outcome.REVIEW,
    "both faces were found and their cosine similarity is in the review band: at least "
    "`face_embedding`'s `review_threshold` and below its `match_threshold`, where the "
    "evaluation cannot say one person or two (docs/models.md)", PERSON_REVIEWS)
ELEVATED_FRAUD_SCORE = Reason(
    "elevated_fraud_score", Outcome.REVIEW,
    "the `antifraud` score is at least `fraud_review_threshold` (and below "
    "`fraud_reject_threshold`)", PERSON_REVIEWS)

DECISION_REASONS: tuple[Reason, ...] = (
    FACE_MISMATCH, LIVENESS_FAILED, LIVENESS_TOKEN_INVALID, LIVENESS_TOKEN_REUSED,
    SELFIE_NOT_LIVE_PERSON, MRZ_CHECK_FAILED, DOCUMENT_EXPIRED, UNDERAGE, HIGH_FRAUD_SCORE,
    NO_FACE_IN_DOCUMENT, NO_FACE_IN_SELFIE, MULTIPLE_FACES_IN_SELFIE, FACE_MATCH_UNCERTAIN,
    LIVENESS_MISSING,
    LIVENESS_TOKEN_EXPIRED, LIVENESS_WITHOUT_PASSIVE_PAD, MRZ_NOT_FOUND, MRZ_MISREAD,
    VISUAL_ZONE_MISMATCH, VISUAL_ZONE_UNREADABLE, ELEVATED_FRAUD_SCORE,
)


@dataclass(frozen=True)
class CheckFailed:
    """A reason code of the liveness verdict: a check of the session failed. A session
    with any is not live (IS_LIVE false), which ``kyc_decision`` rejects
    (``liveness_failed``)."""

    code: str
    check: str  # the check's name in STATUS "checks" (kyc.liveness.session.judge)
    means: str  # for the operator
    told: Told  # what the person can do better on the next try, else no more than that
    # the check did not confirm them


CHALLENGE_NOT_COMPLETED = CheckFailed(
    "challenge_not_completed", "challenge",
    "the challenge's moves were not seen in order (a move the wrong way, or more other "
    "moves on the way than `forgiven_moves`)", MOVES_NOT_SEEN)
FACE_LOOKS_FLAT = CheckFailed(
    "face_looks_flat", "relief",
    "the head turns did not show the relief of a solid face (median relief ratio below "
    "`min_relief`, or none could be measured): a print, a screen, a warp of one photo",
    LIVENESS_NOT_CONFIRMED)
FACE_CHANGED = CheckFailed(
    "face_changed", "same_person",
    "more than `max_other_person_fraction` of the frames compared are not the face of the "
    "best frame", LIVENESS_NOT_CONFIRMED)
MULTIPLE_OR_NO_FACES = CheckFailed(
    "multiple_or_no_faces", "single_face",
    "fewer than `min_single_face_fraction` of the frames show exactly one face",
    PICTURES_UNCLEAR)
TOO_FEW_SHARP_FRAMES = CheckFailed(
    "too_few_sharp_frames", "sharp_frames",
    "fewer than `min_sharp_frames` frames show one face at least `min_sharpness` sharp",
    PICTURES_UNCLEAR)
DURATION_OUT_OF_BOUNDS = CheckFailed(
    "duration_out_of_bounds", "duration",
    "START to END took less than `min_duration_s` or more than `max_duration_s`",
    MOVES_NOT_SEEN)
PASSIVE_PAD_FAILED = CheckFailed(
    "passive_pad_failed", "passive_pad",
    "the passive anti-spoofing model's mean real-face probability is below `min_pad_score` "
    "(only when one is configured)", LIVENESS_NOT_CONFIRMED)

LIVENESS_REASONS: tuple[CheckFailed, ...] = (
    CHALLENGE_NOT_COMPLETED, FACE_LOOKS_FLAT, FACE_CHANGED, MULTIPLE_OR_NO_FACES,
    TOO_FEW_SHARP_FRAMES, DURATION_OUT_OF_BOUNDS, PASSIVE_PAD_FAILED,
)


def every_code() -> tuple[str, ...]:
    """Every reason code a client may see: the decision's, then the liveness verdict's."""
    return tuple(r.code for r in DECISION_REASONS) + tuple(r.code for r in LIVENESS_REASONS)


def told_for() -> dict[str, str | None]:
    """Each reason code -> the code of the coarse reason the person is told (None: no
    more than the decision)."""
    return {r.code: r.told.code if r.told else None
            for r in (*DECISION_REASONS, *LIVENESS_REASONS)}
