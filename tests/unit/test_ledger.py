"""kyc.decision.ledger (one token, one verification) in memory and in a server's folder,
with kyc_decision's step around it: a token spent once, for the application its START
named, and never accepted twice across a reload or a restart."""

from __future__ import annotations

import json
import multiprocessing
import os
import secrets
import time

import numpy as np
import pytest

from decision_cases import NOW, decision_step, live_token, request
from kyc.decision.ledger import (
    FolderLedger,
    LedgerError,
    MemoryLedger,
    Spend,
    ledger_from_environ,
    shm_folder,
)
from kyc.decision.policy import DecisionSettings
from kyc.decision.step import DecisionStep
from kyc.keys import KEY_BYTES

KEY = secrets.token_bytes(KEY_BYTES)


def test_the_memory_ledger_spends_a_token_once_and_forgets_it_at_its_expiry():
    now = [100.0]
    ledger = MemoryLedger(lambda: now[0])
    assert ledger.spend("t1", 100.0, 150.0, "a") is Spend.FIRST
    assert ledger.spend("t1", 100.0, 150.0, "b") is Spend.TAKEN
    assert ledger.spend("t1", 100.0, 150.0, "a") is Spend.AGAIN  # a retry
    assert ledger.spend("t1", 100.0, 150.0, "") is Spend.TAKEN  # no holder: never a retry
    now[0] = 151.0
    assert ledger.spend("t1", 100.0, 300.0, "b") is Spend.FIRST  # expired entries are swept


def test_a_token_issued_before_the_ledger_began_is_not_taken_as_unspent():
    ledger = MemoryLedger(lambda: 1000.0)
    assert ledger.spend("old", 999.9, 1100.0, "a") is Spend.UNKNOWN
    assert ledger.spend("new", 1000.0, 1100.0, "a") is Spend.FIRST
    assert not Spend.UNKNOWN.accepted and not Spend.TAKEN.accepted
    assert Spend.FIRST.accepted and Spend.AGAIN.accepted


def test_the_folder_ledger_outlives_the_process_that_spent_a_token(tmp_path):
    folder = tmp_path / "ledger"
    first = FolderLedger(folder, clock=lambda: 1000.0)
    assert first.spend("t1", 1000.0, 1100.0, "a") is Spend.FIRST
    reloaded = FolderLedger(folder, clock=lambda: 1050.0)  # kyc_decision reloaded
    assert reloaded.began == first.began == 1000.0
    assert reloaded.spend("t1", 1000.0, 1100.0, "b") is Spend.TAKEN
    assert reloaded.spend("t1", 1000.0, 1100.0, "a") is Spend.AGAIN
    assert reloaded.spend("t2", 1010.0, 1100.0, "b") is Spend.FIRST
    assert FolderLedger(tmp_path / "new", clock=lambda: 1050.0).spend(
        "t1", 1000.0, 1100.0, "b") is Spend.UNKNOWN  # a restarted server: a new folder
    assert stat_mode(folder) == 0o700
    assert all(stat_mode(p) == 0o600 for p in folder.iterdir())
    assert not any("t1" in p.name for p in folder.iterdir())  # named by a digest


def stat_mode(path) -> int:
    return os.stat(path).st_mode & 0o777


def test_the_folder_ledger_sweeps_the_files_of_expired_tokens(tmp_path):
    now = [1000.0]
    ledger = FolderLedger(tmp_path / "ledger", clock=lambda: now[0])
    for k in range(5):
        ledger.spend(f"t{k}", 1000.0, 1010.0 + k, "a")
    now[0] = 1000.0 + FolderLedger.PRUNE_EVERY_S + 2.5
    ledger.spend("late", 1000.0, 2000.0, "a")
    left = sorted(p.name for p in (tmp_path / "ledger").iterdir())
    assert len(left) == 1 + 1 + 2  # began, late, the two not yet expired


def _spend_in_a_process(folder: str, token: str, holder: str, queue) -> None:
    queue.put(FolderLedger(__import__("pathlib").Path(folder)).spend(
        token, time.time(), time.time() + 60, holder).value)


def test_processes_spending_one_token_at_once_in_a_folder_cannot_both_win(tmp_path):
    folder = tmp_path / "ledger"
    FolderLedger(folder, clock=lambda: time.time() - 5)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    processes = [context.Process(target=_spend_in_a_process,
                                 args=(str(folder), "contested", f"h{k}", queue))
                 for k in range(6)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(30)
    outcomes = sorted(queue.get(timeout=5) for _ in processes)
    assert outcomes.count("first") == 1 and outcomes.count("taken") == 5, outcomes


def test_a_folder_planted_as_a_link_or_open_to_others_is_refused(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(LedgerError, match="refused"):
        FolderLedger(tmp_path / "link")
    (tmp_path / "open").mkdir()
    os.chmod(tmp_path / "open", 0o755)
    with pytest.raises(LedgerError, match="refused"):
        FolderLedger(tmp_path / "open")


def test_the_environment_chooses_the_ledger_and_a_server_keeps_its_own_folder():
    assert isinstance(ledger_from_environ({}), MemoryLedger)
    assert shm_folder(4242).name == "kyc_4242_ledger"
    with pytest.raises(ValueError, match="redis://"):
        ledger_from_environ({"KYC_TOKEN_LEDGER": "http://x"})


# -- kyc_decision spending tokens -------------------------------------------------------
def _step(settings: DecisionSettings | None = None, began: float = NOW - 60) -> DecisionStep:
    return decision_step(KEY, settings, ledger_began=began)


def _token(application: str | None, issued_at: float = NOW, face: bool = True) -> np.ndarray:
    return live_token(KEY, application, issued_at, face)


def _verify(step: DecisionStep, token: np.ndarray, application: str | None,
            images: dict | None = None) -> dict:
    answer, = step.run([request(images, application, LIVENESS_TOKEN=token)])
    return json.loads(answer["REPORT"][0, 0])


def test_a_token_serves_one_verification_of_the_application_its_start_named():
    step = _step()
    token = _token("app-1")
    other_app = _verify(step, token, "app-2")  # the mule: someone else's application
    assert "liveness_token_invalid" in other_app["reasons"]
    assert "another application" in other_app["liveness"]["problem"]
    first = _verify(step, token, "app-1")
    assert first["decision"] == "approve", first
    retried = _verify(step, token, "app-1")  # the same verification: its reply was lost
    assert retried["decision"] == "approve"
    other_document = {"DOC_": b"another document", "SELFIE_": b"selfie image"}
    again = _verify(step, token, "app-1", other_document)
    assert again["decision"] == "reject" and again["reasons"] == ["liveness_token_reused"]


def test_a_token_bound_to_an_application_is_refused_by_a_request_naming_none():
    refused = _verify(_step(), _token("app-1"), None)
    assert refused["decision"] == "reject", refused
    assert refused["reasons"] == ["liveness_token_invalid"]
    assert refused["liveness_token"] is None  # not spent: its own verification may follow


def test_an_unbound_token_is_taken_once_unless_the_operator_requires_binding():
    assert _verify(_step(), _token(None), None)["decision"] == "approve"
    strict = _verify(_step(DecisionSettings(require_bound_token=True)), _token(None), None)
    assert strict["reasons"] == ["liveness_token_invalid"]


def test_a_token_issued_before_the_ledger_began_is_sent_to_a_new_session():
    report = _verify(_step(began=NOW + 0.5), _token("app-1", issued_at=NOW), "app-1")
    assert report["decision"] == "review" and report["reasons"] == ["liveness_token_expired"]
    assert "new liveness session" in report["liveness"]["problem"]


def test_a_live_token_that_carries_no_face_is_not_the_selfies_person():
    report = _verify(_step(), _token("app-1", face=False), "app-1")
    assert report["decision"] == "reject"
    assert report["reasons"] == ["selfie_not_live_person"], report
    assert report["liveness"]["selfie_similarity"] is None
