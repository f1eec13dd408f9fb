"""What the page tells a person: the decision, a few coarse reasons and every error, in
plain words.

The codes are the pipeline's (``kyc.decision.policy.REASONS``, the liveness verdict's
``kyc.liveness.session.REASONS``); each is told as one of a few coarse reasons, whose
code the page keeps beside the words for the app team. A test holds every code to
one here.
"""

from __future__ import annotations

DECISION = {
    "approve": "You are verified.",
    "review": "We need a person to look at your documents. We will contact you.",
    "reject": "We could not verify you.",
}

# What a person is told of why: a few coarse reasons. Never a score, a threshold or
# which check saw what: those guide an attacker, and they are the operator's, in
# kyc_ensemble's REPORT.
TOLD = {
    "face_not_matched": "The face did not match the document.",
    "face_not_seen": "We could not see one face clearly, in your photo or on the document.",
    "liveness_not_confirmed": "The camera check could not confirm a live person.",
    "moves_not_seen": "The head turns asked were not seen, in that order, in the time "
                      "allowed.",
    "pictures_unclear": "We could not see your face alone and sharp: hold the phone still, "
                        "in good light.",
    "document_unreadable": "The document could not be read.",
    "document_not_accepted": "This document cannot be accepted (its validity, or the "
                             "holder's age).",
    "person_reviews": "A person will look at your application.",
}

# Each reason code of the pipeline -> what the person is told of it (None: nothing more
# than the decision). A unit test holds the keys to the codes as declared:
# kyc.decision.policy.REASONS and the liveness verdict's kyc.liveness.session.REASONS.
TOLD_FOR = {
    # kyc_decision
    "face_mismatch": "face_not_matched",
    "selfie_not_live_person": "face_not_matched",
    "no_face_in_document": "face_not_seen",
    "no_face_in_selfie": "face_not_seen",
    "multiple_faces_in_selfie": "face_not_seen",
    "liveness_failed": "liveness_not_confirmed",
    "liveness_token_invalid": "liveness_not_confirmed",
    "liveness_token_expired": "liveness_not_confirmed",
    "liveness_token_reused": "liveness_not_confirmed",
    "liveness_missing": "liveness_not_confirmed",
    "liveness_without_passive_pad": "person_reviews",
    "mrz_not_found": "document_unreadable",
    "mrz_check_failed": "document_unreadable",
    "visual_zone_mismatch": "document_unreadable",
    "document_expired": "document_not_accepted",
    "underage": "document_not_accepted",
    "elevated_fraud_score": "person_reviews",
    "high_fraud_score": None,
    # the liveness verdict: what the person can do better on the next try, else no more
    # than that the check did not confirm them
    "challenge_not_completed": "moves_not_seen",
    "duration_out_of_bounds": "moves_not_seen",
    "too_few_sharp_frames": "pictures_unclear",
    "multiple_or_no_faces": "pictures_unclear",
    "face_looks_flat": "liveness_not_confirmed",
    "face_changed": "liveness_not_confirmed",
    "passive_pad_failed": "liveness_not_confirmed",
}

ERROR = {
    "busy": "We are busy right now. Please try again in a minute.",
    "expired": "The session has expired. Please start again.",
    "too_fast": "The camera sent pictures too fast.",
    "too_large": "That file is too large.",
    "bad_image": "That file is not a photo we can read (JPEG, PNG or WebP).",
    "bad_request": "This request is not one this page sends. Please start again.",
    "unavailable": "The verification service is not available. Please try again later.",
    "server": "Something went wrong on our side. Please try again.",
}


def reasons(codes: list[str]) -> list[dict[str, str]]:
    """``[{"code", "text"}]`` for the page: each coarse reason of ``codes`` once, in their
    order; a code it does not know is told as the catch-all ``person_reviews``."""
    told = dict.fromkeys(TOLD_FOR.get(code, "person_reviews") for code in codes)
    return [{"code": code, "text": TOLD[code]} for code in told if code is not None]
