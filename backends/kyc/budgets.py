"""Latency budgets per step, as the product design sets them, and what they bound.

The product's end-to-end SLA is 8 s; within it each step has a budget. A model's
``max_queue_delay_microseconds`` (how long its batcher may hold a request to fill a
batch) may use at most ``QUEUE_SHARE`` of its step's budget. The shipped delays
are far below that cap: on a CPU batching saves almost no compute (``kyc bench``
measures the ceiling), so waiting for a batch would add latency and buy nothing;
the cap is what a GPU deployment may raise them to. ``kyc bench`` also reports
each model's measured queue time against its cap.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

SLA_MS = 8000.0
BUDGETS_MS: Mapping[str, float] = {
    "liveness": 500.0,  # one liveness frame
    "face_match": 300.0,  # face path of kyc_ensemble: detect, align, embed
    "ocr": 1000.0,  # document reading
    "antifraud": 200.0,  # fraud score and decision
}
QUEUE_SHARE = 0.3

# model -> the step whose budget bounds it
STEP_OF: Mapping[str, str] = {
    "liveness_sequence": "liveness",
    "face_preprocess": "face_match",
    "face_detector": "face_match",
    "face_embedding": "face_match",
    "ocr_preprocess": "ocr",
    "ocr_det": "ocr",
    "ocr_postprocess": "ocr",
    "ocr_rec": "ocr",
    "antifraud": "antifraud",
    "kyc_decision": "antifraud",
}


def queue_cap_us(model: str) -> float | None:
    """The most a model may hold a request to batch, in microseconds (None: no step)."""
    step = STEP_OF.get(model)
    return None if step is None else BUDGETS_MS[step] * QUEUE_SHARE * 1000.0


def configured_queue_delay_us(repository: Path, model: str) -> int | None:
    """``max_queue_delay_microseconds`` of the model's dynamic or sequence batcher."""
    from kyc.repo.config import load_config

    config = load_config(repository / model / "config.pbtxt")
    if config.HasField("dynamic_batching"):
        return int(config.dynamic_batching.max_queue_delay_microseconds)
    if config.HasField("sequence_batching") and config.sequence_batching.HasField("oldest"):
        return int(config.sequence_batching.oldest.max_queue_delay_microseconds)
    return None


def queue_against_budget(model_stats: Mapping[str, Mapping[str, float]]) -> dict[str, dict]:
    """Each budgeted model's measured mean queue time (``model_stats`` of one bench
    level) against its cap: {"queue_ms", "cap_ms", "within"}."""
    out = {}
    for model, stats in model_stats.items():
        cap = queue_cap_us(model)
        if cap is not None and "queue_us" in stats:
            out[model] = {"queue_ms": round(stats["queue_us"] / 1000.0, 1),
                          "cap_ms": round(cap / 1000.0, 1),
                          "within": bool(stats["queue_us"] <= cap)}
    return out
