"""docs/reason-codes.md, from the one declaration of the reason codes (kyc.reasons)."""

from __future__ import annotations

from kyc.reasons import (
    DECISION_REASONS,
    LIVENESS_REASONS,
    OUTCOME_MEANS,
    OUTCOME_TOLD,
    TOLD,
    Outcome,
    Told,
)
from kyc_tools.docs import header, table


def _told(told: Told | None) -> str:
    return "(the decision only)" if told is None else f"`{told.code}`"


def reason_codes_page() -> str:
    """The page: every code, what it means for the operator, what the person is told."""
    decision = [(f"`{r.code}`", r.outcome.value, r.means, _told(r.told))
                for r in DECISION_REASONS]
    liveness = [(f"`{r.code}`", f"`{r.check}`", r.means, _told(r.told))
                for r in LIVENESS_REASONS]
    outcomes = [(f"`{o.value}`", OUTCOME_MEANS[o], OUTCOME_TOLD[o]) for o in Outcome]
    told = [(f"`{t.code}`", t.text) for t in TOLD]
    return (
        "# Reason codes\n\n"
        + header("reasons", "backends/kyc/reasons.py")
        + "\nThe stable snake_case codes the pipeline gives, what each means for the "
        "operator, and what the\nperson at the capture page (`kyc web`) is told of it: "
        "never a code, a score or which check\nsaw what, only one of a few coarse reasons "
        "(below). Codes are part of what clients see:\nthey are added, never renamed. "
        "To add one: [vocabularies.md](vocabularies.md).\n\n"
        "## `kyc_ensemble`: REPORT `reasons`\n\n"
        "`kyc_decision`'s codes, in the order REPORT lists them. The decision is `reject` "
        "when any\nreject reason holds, else `review` when any review reason holds, else "
        "`approve`. The\nthresholds named are `kyc_decision`'s config parameters (the face "
        "threshold is\n`face_embedding`'s).\n\n"
        + table(("code", "decision", "what it means", "the person is told"), decision)
        + "\n## `liveness_sequence`: STATUS `reasons` at END\n\n"
        "The liveness verdict's codes: each names the check (STATUS `checks`) that failed. "
        "A session\nwith any is not live, and `kyc_ensemble` rejects its token "
        "(`liveness_failed`). The thresholds\nnamed are `liveness_sequence`'s config "
        "parameters.\n\n"
        + table(("code", "check", "what it means", "the person is told"), liveness)
        + "\n## What the person is told\n\n"
        "The decision:\n\n"
        + table(("DECISION", "when", "words"), outcomes)
        + "\nAnd each coarse reason once, in the order of the codes; a code the page does "
        "not know is\ntold as `person_reviews`:\n\n"
        + table(("coarse reason", "words"), told)
    )
