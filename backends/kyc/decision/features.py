"""The antifraud feature vector: versioned, in a pinned order.

``kyc_decision`` builds one vector per request from what the other models found;
the ``antifraud`` model scores it. The order below is also pinned in
``kyc_tools/assets/manifest.json`` (``trained.antifraud.features``) and written into the
model's metadata (``kyc.features``): ``kyc_decision`` refuses to start when the
served model was trained on another vector, and a CSV to train on must have
exactly these columns (plus ``label``).

Every feature is a float; "unknown" has a stated value so that a missing piece
(no face, no MRZ) is a signal, never a NaN.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any

import numpy as np

FEATURES_VERSION = "kyc-antifraud-features-v1"

FEATURES: tuple[str, ...] = (
    "face_match_score",      # cosine of document portrait and selfie; -1 when a face is missing
    "document_face_found",   # 0/1
    "selfie_face_found",     # 0/1
    "selfie_faces",          # faces seen in the selfie, capped at 3
    "liveness_score",        # from a valid token; -1 without one
    "liveness_live",         # 0/1: a valid token that says live
    "liveness_match",        # cosine of the selfie and the token's live face; -1 without
    "liveness_mismatch",     # with a token: max(0, 0.5 - liveness_match); 0 without
    "mrz_found",             # 0/1
    "mrz_valid",             # 0/1
    "mrz_checks_failed",     # failing check digits (0..5)
    "mrz_corrections",       # OCR corrections the MRZ needed
    "mrz_confidence",        # mean recogniser confidence of the MRZ lines; 0 without
    "years_to_expiry",       # clipped to [-10, 10]; 0 when unknown
    "age_years",             # 0 when unknown
    "selfie_sharpness",      # log1p(variance of the Laplacian) of the aligned selfie face
    "document_face_sharpness",  # the same for the document portrait
)


@dataclass(frozen=True)
class Observation:
    """What the ensemble's models found for one request (the decision's inputs)."""

    face_match_score: float  # -1 when a face is missing
    document_face_found: bool
    selfie_face_found: bool
    selfie_faces: int
    liveness_score: float  # -1 without a valid token
    liveness_live: bool
    liveness_match: float  # -1 without a valid token
    document: Mapping[str, Any]  # document_ocr's DOCUMENT
    mrz_confidence: float
    selfie_quality: Mapping[str, Any]
    document_face_quality: Mapping[str, Any]


def years_between(start: date, end: date) -> float:
    return (end - start).days / 365.25


def age_years(birth: str | None, today: date) -> float | None:
    if not birth:
        return None
    born = date.fromisoformat(birth)
    return today.year - born.year - ((today.month, today.day) < (born.month, born.day))


def vector(obs: Observation, today: date) -> np.ndarray:
    """The FEATURES of one request, float32, in order."""
    mrz = obs.document.get("mrz") or {}
    fields = obs.document.get("fields") or {}
    checks = mrz.get("checks") or {}
    expiry = fields.get("expiry_date")
    age = age_years(fields.get("birth_date"), today)
    values = {
        "face_match_score": obs.face_match_score,
        "document_face_found": float(obs.document_face_found),
        "selfie_face_found": float(obs.selfie_face_found),
        "selfie_faces": float(min(obs.selfie_faces, 3)),
        "liveness_score": obs.liveness_score,
        "liveness_live": float(obs.liveness_live),
        "liveness_match": obs.liveness_match,
        "liveness_mismatch": max(0.0, 0.5 - obs.liveness_match) if obs.liveness_match > -1
        else 0.0,
        "mrz_found": float(bool(mrz)),
        "mrz_valid": float(bool(mrz) and mrz.get("valid") is True),
        "mrz_checks_failed": float(sum(v is False for v in checks.values())),
        "mrz_corrections": _count(mrz.get("corrections")),
        "mrz_confidence": obs.mrz_confidence,
        "years_to_expiry": 0.0 if not expiry else float(np.clip(
            years_between(today, date.fromisoformat(expiry)), -10, 10)),
        "age_years": 0.0 if age is None else float(age),
        "selfie_sharpness": _log_sharpness(obs.selfie_quality),
        "document_face_sharpness": _log_sharpness(obs.document_face_quality),
    }
    return np.array([values[name] for name in FEATURES], dtype=np.float32)


def _log_sharpness(quality: Mapping[str, Any]) -> float:
    return math.log1p(max(float(quality.get("sharpness", 0.0)), 0.0))


def _count(value: Any) -> float:
    """A count reported as a number or as a list of items."""
    if isinstance(value, (list, tuple, dict)):
        return float(len(value))
    return float(value or 0)
