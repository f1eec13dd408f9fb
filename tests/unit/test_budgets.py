"""Latency budgets: every served step is bounded, and the shipped queue delays fit."""

from __future__ import annotations

from kyc.budgets import (
    BUDGETS_MS,
    QUEUE_SHARE,
    SLA_MS,
    STEP_OF,
    configured_queue_delay_us,
    queue_against_budget,
    queue_cap_us,
)
from kyc.repo.config import load_config
from kyc_testing import SHIPPED_REPOSITORY

ENSEMBLES = {"kyc_ensemble", "document_ocr"}


def test_every_shipped_model_but_the_ensembles_has_a_step_budget():
    models = {p.parent.name for p in SHIPPED_REPOSITORY.glob("*/config.pbtxt")}
    assert models - ENSEMBLES == set(STEP_OF)
    assert sum(BUDGETS_MS.values()) <= SLA_MS


def test_each_shipped_queue_delay_is_set_and_within_its_share_of_the_budget():
    for model in STEP_OF:
        delay = configured_queue_delay_us(SHIPPED_REPOSITORY, model)
        assert delay is not None and 0 < delay <= queue_cap_us(model), model
    assert queue_cap_us("ocr_rec") == BUDGETS_MS["ocr"] * QUEUE_SHARE * 1000
    assert queue_cap_us("kyc_ensemble") is None
    assert load_config(SHIPPED_REPOSITORY / "kyc_ensemble" / "config.pbtxt").platform == "ensemble"


def test_measured_queue_times_are_judged_against_the_cap():
    judged = queue_against_budget({"face_embedding": {"queue_us": 95_000.0},
                                   "ocr_rec": {"queue_us": 12_000.0},
                                   "kyc_ensemble": {"queue_us": 1.0}})
    assert judged == {"face_embedding": {"queue_ms": 95.0, "cap_ms": 90.0, "within": False},
                      "ocr_rec": {"queue_ms": 12.0, "cap_ms": 300.0, "within": True}}
