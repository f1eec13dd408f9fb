"""What the page tells a person: every reason code and every error in plain words.

The codes are the pipeline's (``kyc.decision.policy.REASONS``, the liveness verdict's
``kyc.liveness.session.REASONS``); the page shows the words, and keeps the code beside
them for the app team. A test holds every code to a sentence here.
"""

from __future__ import annotations

DECISION = {
    "approve": "You are verified.",
    "review": "We need a person to look at your documents. We will contact you.",
    "reject": "We could not verify you.",
}

REASON = {
    # kyc_decision
    "face_mismatch": "The face on the document does not match your face.",
    "liveness_failed": "The camera check did not show a live person.",
    "liveness_token_invalid": "The camera check could not be confirmed.",
    "selfie_not_live_person": "The photo of you is not the person of the camera check.",
    "mrz_check_failed": "The code at the bottom of the document did not read correctly.",
    "document_expired": "The document has expired.",
    "underage": "You must be of age to be verified.",
    "high_fraud_score": "The application was flagged by our checks.",
    "no_face_in_document": "We could not find a face on the document.",
    "no_face_in_selfie": "We could not find your face in the photo.",
    "multiple_faces_in_selfie": "More than one face was in the photo.",
    "liveness_missing": "The camera check was not done.",
    "liveness_token_expired": "The camera check is too old: please do it again.",
    "liveness_without_passive_pad": "A person will confirm the camera check.",
    "mrz_not_found": "We could not find the code at the bottom of the document.",
    "visual_zone_mismatch": "The printed name or number does not match the document's code.",
    "elevated_fraud_score": "The application needs a second look.",
    # the liveness verdict
    "challenge_not_completed": "The head turns asked were not seen, in that order.",
    "face_looks_flat": "The camera did not see a real head turning.",
    "face_changed": "Another face appeared during the check.",
    "multiple_or_no_faces": "Your face was not alone, or not seen, in most pictures.",
    "too_few_sharp_frames": "The pictures were blurred: hold the phone still, in good light.",
    "duration_out_of_bounds": "The check was too short or too long.",
    "passive_pad_failed": "The camera did not see a real face.",
}

ERROR = {
    "busy": "We are busy right now. Please try again in a minute.",
    "expired": "The session has expired. Please start again.",
    "too_fast": "The camera sent pictures too fast.",
    "too_large": "That file is too large.",
    "bad_image": "That file is not a photo we can read (JPEG, PNG or WebP).",
    "unavailable": "The verification service is not available. Please try again later.",
    "server": "Something went wrong on our side. Please try again.",
}


def reasons(codes: list[str]) -> list[dict[str, str]]:
    """``[{"code", "text"}]`` for the page; a code without words keeps its code."""
    return [{"code": code, "text": REASON.get(code, code.replace("_", " "))} for code in codes]
