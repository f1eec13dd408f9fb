"""What the page tells a person: the decision, a few coarse reasons and every error, in
plain words.

The decision's words, the coarse reasons and which of them each reason code of the
pipeline is told as are declared with the codes, in the serving package
(:mod:`kyc.reasons`: kyc_decision's codes and the liveness verdict's); the page keeps a
coarse reason's code beside its words for the app team. The errors are the page's own.
"""

from __future__ import annotations

from kyc.reasons import OUTCOME_TOLD, PERSON_REVIEWS, told_for
from kyc.reasons import TOLD as _TOLD

DECISION = {outcome.value: text for outcome, text in OUTCOME_TOLD.items()}

# What a person is told of why: a few coarse reasons. Never a score, a threshold or
# which check saw what: those guide an attacker, and they are the operator's, in
# kyc_ensemble's REPORT.
TOLD = {told.code: told.text for told in _TOLD}

# Each reason code of the pipeline -> the coarse reason the person is told of it (None:
# nothing more than the decision).
TOLD_FOR = told_for()

ERROR = {
    "busy": "We are busy right now. Please try again in a minute.",
    "expired": "The session has expired. Please start again.",
    "too_fast": "The camera sent pictures too fast.",
    "too_large": "That file is too large.",
    "too_slow": "Your connection is too slow to send the photos. Please try again on a "
                "better connection.",
    "bad_image": "That file is not a photo we can read (JPEG, PNG or WebP).",
    "bad_request": "This request is not one this page sends. Please start again.",
    "unavailable": "The verification service is not available. Please try again later.",
    "server": "Something went wrong on our side. Please try again.",
}


def reasons(codes: list[str]) -> list[dict[str, str]]:
    """``[{"code", "text"}]`` for the page: each coarse reason of ``codes`` once, in their
    order; a code it does not know is told as the catch-all ``person_reviews``."""
    told = dict.fromkeys(TOLD_FOR.get(code, PERSON_REVIEWS.code) for code in codes)
    return [{"code": code, "text": TOLD[code]} for code in told if code is not None]
