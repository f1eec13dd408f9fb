"""``kyc eval antifraud``: ROC AUC and the score distribution of the served fraud scorer on
labelled cases, per version, at the decision's own thresholds.

The cases are rows of the feature vector ``kyc_decision`` builds
(:data:`kyc.decision.features.FEATURES`), with ``label`` (1: fraud) and, optionally,
``kind`` (the kind of fraud: figures per kind too).
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kyc.decision.features import FEATURES
from kyc_tools.dev.eval import MEASURED, metrics
from kyc_tools.dev.eval.calls import array_input, each, error_text
from kyc_tools.dev.eval.data import read_cases
from kyc_tools.dev.eval.server import EvalServer, pick_versions
from kyc_tools.repo.config import model_parameters

log = logging.getLogger(__name__)

MODEL = MEASURED["antifraud"]
DECISION = "kyc_decision"
THRESHOLDS = ("fraud_review_threshold", "fraud_reject_threshold")


def kinds_of(path: Path) -> list[str] | None:
    """The optional ``kind`` column."""
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        if "kind" not in (reader.fieldnames or []):
            return None
        return [row["kind"] for row in reader]


def score(server: EvalServer, x: np.ndarray, version: int, batch: int) -> np.ndarray:
    chunks = [x[k:k + batch] for k in range(0, len(x), batch)]
    with server.client() as client:

        def one(chunk: np.ndarray) -> np.ndarray:
            result = client.infer(MODEL, [array_input("FEATURES", chunk, "FP32")],
                                  model_version=str(version))
            return result.as_numpy("FRAUD_SCORE").reshape(-1)

        out = each(one, chunks, f"cases v{version}", in_flight=2)
    failed = [r for r in out if isinstance(r, Exception)]
    if failed:
        raise RuntimeError(f"{MODEL} version {version}: {error_text(failed[0])}")
    return np.concatenate(out)  # type: ignore[arg-type]


def run(csv_path: Path, repository: Path, versions: Sequence[int] | None = None
        ) -> dict[str, Any]:
    x, y = read_cases(csv_path, FEATURES)
    kinds = kinds_of(csv_path)
    versions = pick_versions(repository, MODEL, versions)
    result: dict[str, Any] = {"kind": "antifraud", "data": str(csv_path),
                              "repository": str(repository), "model": MODEL,
                              "cases": len(y), "fraud_cases": int(y.sum()), "versions": {}}
    decision = (model_parameters(repository, DECISION)
                if (repository / DECISION / "config.pbtxt").is_file() else {})
    thresholds = {k: float(decision[k]) for k in THRESHOLDS if k in decision}
    result["thresholds_from"] = f"{DECISION}/config.pbtxt"
    for version in versions:
        with EvalServer(repository, [MODEL], MODEL, version) as server:
            batch = int(server.config(MODEL).get("max_batch_size", 1)) or 1
            scores = score(server, x, version, batch)
        figures = metrics.fraud_figures(scores, y, thresholds)
        if kinds is not None:
            figures["by_kind"] = {}
            for kind in sorted(set(kinds)):
                mask = np.array([k == kind for k in kinds])
                figures["by_kind"][kind] = {
                    "cases": int(mask.sum()),
                    "score_median": round(float(np.median(scores[mask])), 4),
                    **{f"at_or_above_{name}": round(float(np.mean(scores[mask] >= t)), 4)
                       for name, t in thresholds.items()}}
        figures["_scores"], figures["_labels"] = scores, y
        result["versions"][str(version)] = figures
        log.info("antifraud: version %d: ROC AUC %s on %d cases", version, figures["roc_auc"],
                 figures["cases"])
    result["recommendation"] = recommend(result)
    return result


def recommend(result: dict[str, Any]) -> str:
    ranked = sorted(result["versions"].items(),
                    key=lambda i: (-(i[1]["roc_auc"] or 0.0), -int(i[0])))
    best, f = ranked[0]
    line = f"{MODEL} version {best}: ROC AUC {f['roc_auc']:.4f}" if f["roc_auc"] is not None \
        else f"{MODEL} version {best}: no ROC AUC (the cases need both labels)"
    review = f.get("fraud", {}).get("at_or_above", {}).get("fraud_review_threshold")
    if review is not None:
        line += f", {metrics.percent(review)} of fraud cases at or above the review threshold"
    if len(ranked) > 1:
        line += " (" + "; ".join(f"version {v}: {g['roc_auc']:.4f}" for v, g in ranked[1:]
                                 if g["roc_auc"] is not None) + ")"
    return line
