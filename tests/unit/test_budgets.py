"""Latency budgets: every served step is bounded, and the shipped queue delays fit."""

from __future__ import annotations

import pytest

from kyc.budgets import BUDGETS_MS, QUEUE_SHARE, SLA_MS, queue_against_budget
from kyc_testing import SHIPPED_REPOSITORY
from kyc_tools.repo.config import load_config, parse_config
from kyc_tools.repo.graph.build import build_graph
from kyc_tools.repo.graph.derive import step_map
from kyc_tools.repo.queues import (
    MAX_QUEUE_SIZE,
    QueuePolicy,
    configured_queue_delay_us,
    configured_queue_policy,
    with_queue_policy,
)

ENSEMBLES = {"kyc_ensemble", "document_ocr"}
# Derived from the shipped configs and the steps' declarations (kyc.pipeline.contract)
STEPS = step_map(build_graph(SHIPPED_REPOSITORY))
STEP_OF, SEQUENCE_MODELS = STEPS.step_of, STEPS.sequence
queue_cap_us, queue_timeout_us = STEPS.queue_cap_us, STEPS.queue_timeout_us


def test_the_derived_budget_steps_are_the_product_designs():
    # each Python step declares its own; a model it runs counts to its caller's (the
    # decision's face embeddings to face matching, as it declares), the tightest of several
    assert dict(STEP_OF) == {
        "liveness_sequence": "liveness", "face_landmarks": "liveness",
        "kyc_intake": "intake",
        "face_preprocess": "face_match", "face_detector": "face_match",
        "face_embedding": "face_match",
        "ocr_preprocess": "ocr", "ocr_det": "ocr", "ocr_postprocess": "ocr",
        "ocr_fields": "ocr", "ocr_rec": "ocr", "mrz_rec": "ocr",
        "antifraud": "antifraud", "kyc_decision": "antifraud"}
    assert {"liveness_sequence"} == SEQUENCE_MODELS


def test_every_shipped_model_but_the_ensembles_has_a_step_budget():
    models = {p.parent.name for p in SHIPPED_REPOSITORY.glob("*/config.pbtxt")}
    assert models - ENSEMBLES == set(STEP_OF)
    assert sum(BUDGETS_MS.values()) <= SLA_MS


def test_each_shipped_queue_delay_is_within_its_share_of_the_budget():
    for model in STEP_OF:
        delay = configured_queue_delay_us(SHIPPED_REPOSITORY, model) or 0
        assert 0 <= delay <= queue_cap_us(model), model
    assert queue_cap_us("ocr_rec") == BUDGETS_MS["ocr"] * QUEUE_SHARE * 1000
    assert queue_cap_us("kyc_ensemble") is None
    assert load_config(SHIPPED_REPOSITORY / "kyc_ensemble" / "config.pbtxt").platform == "ensemble"


def test_measured_queue_times_are_judged_against_the_cap():
    judged = queue_against_budget({"face_embedding": {"queue_us": 95_000.0},
                                   "ocr_rec": {"queue_us": 12_000.0},
                                   "kyc_ensemble": {"queue_us": 1.0}}, STEPS)
    assert judged == {"face_embedding": {"queue_ms": 95.0, "cap_ms": 90.0, "within": False},
                      "ocr_rec": {"queue_ms": 12.0, "cap_ms": 300.0, "within": True}}



def policies_by_the_rule(tmp_path) -> dict[str, QueuePolicy | None]:
    """Every shipped config with the rule's policy applied, as Triton would read it."""
    out = {}
    for model in STEP_OF:
        config = (SHIPPED_REPOSITORY / model / "config.pbtxt").read_text()
        (tmp_path / model).mkdir()
        if model not in SEQUENCE_MODELS:
            config = with_queue_policy(config, model, STEPS)
        (tmp_path / model / "config.pbtxt").write_text(config)
        out[model] = configured_queue_policy(tmp_path, model)
    return out


def test_the_rule_gives_every_dynamically_batched_model_a_reject_policy_within_its_share(
        tmp_path):
    policies = policies_by_the_rule(tmp_path)
    for model in set(STEP_OF) - SEQUENCE_MODELS:
        policy = policies[model]
        assert policy == QueuePolicy("REJECT", queue_timeout_us(model), MAX_QUEUE_SIZE, False)
        # a batch may be held to fill it only well within the time it may queue
        assert configured_queue_delay_us(tmp_path, model) < policy.timeout_us, model
    assert policies["liveness_sequence"] is None


def test_the_queue_timeouts_of_a_steps_models_add_up_to_at_most_its_queue_share(tmp_path):
    policies = policies_by_the_rule(tmp_path)
    for step, budget in BUDGETS_MS.items():
        models = [m for m, s in STEP_OF.items() if s == step and m not in SEQUENCE_MODELS]
        total = sum(policies[m].timeout_us for m in models)
        assert total <= budget * QUEUE_SHARE * 1000 <= budget * 1000, step


def test_the_queue_timeout_rule_splits_the_steps_share_evenly():
    assert queue_timeout_us("face_preprocess") == 300 * QUEUE_SHARE * 1000 / 3
    # ocr_preprocess, ocr_det, ocr_postprocess or ocr_fields, ocr_rec, mrz_rec: 6 (a share
    # to spare)
    share = 1000 * QUEUE_SHARE * 1000 / 6
    assert queue_timeout_us("ocr_rec") == queue_timeout_us("mrz_rec") == share
    assert queue_timeout_us("kyc_decision") == queue_timeout_us("antifraud")
    assert queue_timeout_us("liveness_sequence") is None
    assert queue_timeout_us("kyc_ensemble") is None


def test_a_policy_is_not_added_twice_nor_to_a_model_without_a_dynamic_batcher(tmp_path):
    config = (SHIPPED_REPOSITORY / "face_preprocess" / "config.pbtxt").read_text()
    with pytest.raises(ValueError, match="already"):
        with_queue_policy(with_queue_policy(config, "face_preprocess", STEPS), "face_preprocess",
                          STEPS)
    liveness = (SHIPPED_REPOSITORY / "liveness_sequence" / "config.pbtxt").read_text()
    with pytest.raises(ValueError):
        with_queue_policy(liveness, "liveness_sequence", STEPS)


def test_the_policy_goes_into_the_config_with_its_comments_and_says_reject():
    text = (SHIPPED_REPOSITORY / "face_preprocess" / "config.pbtxt").read_text()

    new = with_queue_policy(text, "face_preprocess", STEPS)

    expected = parse_config(text)
    policy = expected.dynamic_batching.default_queue_policy
    policy.default_timeout_microseconds = queue_timeout_us("face_preprocess")
    policy.max_queue_size = MAX_QUEUE_SIZE  # REJECT, no override: the proto3 defaults
    assert parse_config(new) == expected
    def comments(config: str) -> list[str]:
        return [line.strip() for line in config.splitlines() if line.strip().startswith("#")]

    assert comments(new) == comments(text)
    assert "    timeout_action: REJECT" in new.splitlines()
    assert "    allow_timeout_override: false" in new.splitlines()
