"""``kyc bench``'s in-process kyc_ensemble (KycInProcess) answers what the server answers.

The same rendered passport pages and real selfies go to the served kyc_ensemble
(KycClient) and through KycInProcess on the same repository: the decisions, their
reasons and the scores must agree, so that the in-process figures are the limit of
the served pipeline and not of another one.
"""

from __future__ import annotations

import pytest

from kyc_client.sdk import KycClient
from kyc_tools.dev.bench.kyc import KycCase, KycInProcess, kyc_cases

pytestmark = pytest.mark.integration

CASES = 2  # one per pair of real photos (person_a, person_b)


def unsigned(report: dict) -> dict:
    """A REPORT without what each signer puts there on its own: its signature, and the
    second it signed at."""
    return {k: v for k, v in report.items() if k not in ("signature", "issued_at")}


@pytest.fixture(scope="module")
def cases() -> list[KycCase]:
    return kyc_cases(CASES)


@pytest.fixture(scope="module")
def runner(served_repository) -> KycInProcess:
    return KycInProcess(served_repository)


def test_in_process_decisions_reasons_and_scores_equal_the_served_ones(server, runner, cases):
    """One case at a time, as the served requests are sent here: the same batches, the
    same figures."""
    with KycClient(server.options.grpc_url) as client:
        served = [client.verify(case.document, case.selfie) for case in cases]
    in_process = [runner.verify([case])[0] for case in cases]
    for ours, theirs in zip(in_process, served, strict=True):
        assert not isinstance(ours, Exception), ours
        assert (ours.decision, ours.reasons) == (theirs.decision, theirs.reasons)
        assert ours.face_match_score == pytest.approx(theirs.face_match_score, abs=1e-3)
        assert ours.fraud_score == pytest.approx(theirs.fraud_score, abs=1e-3)
        # each signs with its own key, at its own second (kyc.verdict): the rest is equal
        assert "signature" in ours.report and "signature" in theirs.report
        assert unsigned(ours.report) == unsigned(theirs.report)
    # no liveness token: never approved; the same person on the page and in the selfie
    assert {v.decision for v in served} == {"review"}


def test_batched_in_process_cases_reach_the_served_decisions(server, runner, cases):
    """Batched, the pages' text crops share ocr_rec runs and are padded to each other's
    widths, so recognition confidences move a little (MRZ confidence 0.9762 against
    0.9808 alone, measured on 2026-11-25's rendered pages: the fraud score by 0.003), as
    they do between differently batched served requests; the decisions do not."""
    with KycClient(server.options.grpc_url) as client:
        served = [client.verify(case.document, case.selfie) for case in cases]
    for ours, theirs in zip(runner.verify(cases), served, strict=True):
        assert not isinstance(ours, Exception), ours
        assert (ours.decision, ours.reasons) == (theirs.decision, theirs.reasons)
        assert ours.face_match_score == pytest.approx(theirs.face_match_score, abs=1e-3)
        assert ours.fraud_score == pytest.approx(theirs.fraud_score, abs=0.02)


def test_a_garbage_document_fails_its_case_alone_and_the_others_are_decided(runner, cases):
    garbage = KycCase(b"not an image", cases[0].selfie)
    outcomes = runner([cases[0], garbage, cases[1]])
    assert isinstance(outcomes[1], Exception)
    for outcome in (outcomes[0], outcomes[2]):
        assert outcome == {"requests_decided": 1, "decision_review": 1, "face_matched": 1}
