"""The field's measures of a biometric or fraud model, from scores and labels (pure numpy).

Face recognition (as NIST FRVT reports it; ISO/IEC 19795-1):

- a *comparison score* is the cosine of two embeddings; a pair is *accepted* as the
  same person when its score is at least the threshold;
- FNMR(t): genuine pairs (same person) whose score is below t;
- FMR(t): impostor pairs (different people) whose score is at least t;
- the threshold for a target FMR: the smallest t whose FMR is at most the target;
- EER: where FNMR and FMR cross (the mean of the two at the closest threshold);
- a DET curve: FNMR against FMR over every threshold.

Presentation attacks (ISO/IEC 30107-3): APCER, the share of attack presentations of
one type accepted as bona fide (the worst type is the figure that counts); BPCER, the
share of bona fide presentations rejected.

Fraud scores: ROC AUC (scikit-learn's ``roc_auc_score``), the share of cases above each
configured threshold per label.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


def cosine_matrix(embeddings: np.ndarray) -> np.ndarray:
    """Cosine similarity of every pair of rows (rows L2-normalised here: a model that
    already normalises is unchanged)."""
    e = np.asarray(embeddings, dtype=np.float64)
    norms = np.linalg.norm(e, axis=1, keepdims=True)
    e = e / np.where(norms > 0, norms, 1.0)
    return e @ e.T


@dataclass(frozen=True)
class Pairs:
    """Every unordered pair of the images whose face was found: genuine when both are
    of the same person."""

    genuine: np.ndarray  # scores
    impostor: np.ndarray
    genuine_index: tuple[tuple[int, int], ...]  # image indices of each genuine pair
    impostor_index: tuple[tuple[int, int], ...]


def pair_scores(scores: np.ndarray, people: Sequence[str], usable: Sequence[bool]) -> Pairs:
    """The genuine and impostor pairs of ``scores`` (a cosine matrix), over the images
    marked ``usable`` (a face was found)."""
    genuine, impostor, g_index, i_index = [], [], [], []
    kept = [i for i, ok in enumerate(usable) if ok]
    for i, j in itertools.combinations(kept, 2):
        if people[i] == people[j]:
            genuine.append(scores[i, j])
            g_index.append((i, j))
        else:
            impostor.append(scores[i, j])
            i_index.append((i, j))
    return Pairs(np.asarray(genuine, dtype=np.float64), np.asarray(impostor, dtype=np.float64),
                 tuple(g_index), tuple(i_index))


def fnmr_at(genuine: np.ndarray, threshold: float) -> float | None:
    """Share of genuine scores below ``threshold`` (None without genuine pairs)."""
    return float(np.mean(genuine < threshold)) if len(genuine) else None


def fmr_at(impostor: np.ndarray, threshold: float) -> float | None:
    """Share of impostor scores at or above ``threshold`` (None without impostor pairs)."""
    return float(np.mean(impostor >= threshold)) if len(impostor) else None


def threshold_for_fmr(impostor: np.ndarray, target: float) -> float | None:
    """The smallest threshold whose FMR on ``impostor`` is at most ``target``.

    With n impostor pairs, FMR moves in steps of 1/n: below 1/n the only FMR reachable
    is 0, and the threshold is then just above the highest impostor score (what the
    data can say; :func:`fmr_resolution` tells the report how much that is)."""
    if not len(impostor):
        return None
    ranked = np.sort(impostor)[::-1]  # highest first
    allowed = math.floor(target * len(ranked) + 1e-9)  # impostors that may be accepted
    if allowed >= len(ranked):
        return float(ranked[-1])
    # Accept at most `allowed` of them: the threshold just above the next one.
    return float(np.nextafter(ranked[allowed], np.inf))


def fmr_resolution(impostor_pairs: int) -> float | None:
    """The smallest non-zero FMR that ``impostor_pairs`` pairs can measure."""
    return 1.0 / impostor_pairs if impostor_pairs else None


def det_curve(genuine: np.ndarray, impostor: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                  np.ndarray]:
    """(thresholds, FMR, FNMR) at every distinct score and just above the highest (where
    nothing is accepted), thresholds ascending."""
    thresholds = np.unique(np.concatenate([genuine, impostor]))
    if not len(thresholds):
        return thresholds, thresholds, thresholds
    thresholds = np.append(thresholds, np.nextafter(thresholds[-1], np.inf))
    g, i = np.sort(genuine), np.sort(impostor)
    fnmr = np.searchsorted(g, thresholds, side="left") / max(len(g), 1)
    fmr = 1.0 - np.searchsorted(i, thresholds, side="left") / max(len(i), 1)
    return thresholds, fmr, fnmr


def equal_error_rate(genuine: np.ndarray, impostor: np.ndarray) -> tuple[float | None,
                                                                         float | None]:
    """(EER, its threshold): where FNMR and FMR are closest, their mean there."""
    if not len(genuine) or not len(impostor):
        return None, None
    thresholds, fmr, fnmr = det_curve(genuine, impostor)
    k = int(np.argmin(np.abs(fmr - fnmr)))
    return float((fmr[k] + fnmr[k]) / 2), float(thresholds[k])


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(at most ``k`` of ``n`` trials happen) when each happens with probability ``p``."""
    if k < 0:
        return 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    return min(1.0, sum(math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                                 + i * log_p + (n - i) * log_q) for i in range(k + 1)))


def mcnemar_p(only_first: int, only_second: int) -> float:
    """McNemar's exact two-sided p: how likely a split as uneven as ``only_first`` to
    ``only_second`` (the pairs only one of two matchers got wrong) is by chance alone."""
    n = only_first + only_second
    if n == 0:
        return 1.0
    return min(1.0, 2.0 * binomial_cdf(min(only_first, only_second), n, 0.5))


def threshold_for_fmr_bound(impostor: np.ndarray, target: float,
                            confidence: float = 0.95) -> float | None:
    """The smallest threshold at which the data shows FMR <= ``target`` with ``confidence``
    (one-sided, exact binomial: the Clopper-Pearson bound), or None when there are too few
    impostor pairs to show it even with none accepted (fewer than about 3 / ``target``).

    It accepts the k highest impostor pairs for the largest k whose bound is still within
    ``target``: with 43,500 pairs and 1e-4, k = 0 (just above the highest impostor score).
    Pairs share photographs, so they are not independent: the bound is optimistic."""
    n = len(impostor)
    k = -1
    while k + 1 < n and binomial_cdf(k + 1, n, target) <= 1.0 - confidence:
        k += 1
    if k < 0:
        return None
    ranked = np.sort(impostor)[::-1]
    return float(np.nextafter(ranked[k], np.inf))


def band_figures(genuine: np.ndarray, impostor: np.ndarray, low: float, high: float) -> dict:
    """What a review band ``[low, high)`` below the match threshold ``high`` does: the
    genuine pairs it saves from a reject and the impostor pairs it sends to a person."""
    return {"review_threshold": low,
            "fnmr_below_review": fnmr_at(genuine, low),
            "genuine_in_band": float(np.mean((genuine >= low) & (genuine < high)))
            if len(genuine) else None,
            "impostor_in_band": float(np.mean((impostor >= low) & (impostor < high)))
            if len(impostor) else None}


# The review band's lower edge the evaluation proposes: the score one impostor in a hundred
# reaches. Below it a pair is surely not one person (reject); from it up to the match
# threshold a person looks (review).
REVIEW_FMR = 1e-2


def face_figures(genuine: np.ndarray, impostor: np.ndarray, threshold: float,
                 target_fmr: float, review_threshold: float | None = None) -> dict:
    """Every figure of one version: counts, FNMR/FMR at ``threshold``, the threshold for
    ``target_fmr`` (the point estimate) and the one the data shows within it at 95%
    confidence (:func:`threshold_for_fmr_bound`), FNMR at each, what the review band
    does, EER."""
    at_target = threshold_for_fmr(impostor, target_fmr)
    eer, eer_threshold = equal_error_rate(genuine, impostor)
    shown = threshold_for_fmr_bound(impostor, target_fmr)
    review = threshold if review_threshold is None else review_threshold
    return {
        **band_figures(genuine, impostor, review, threshold),
        "threshold_at_fmr_bound": shown,
        "fnmr_at_fmr_bound": None if shown is None else fnmr_at(genuine, shown),
        "fmr_at_fmr_bound": None if shown is None else fmr_at(impostor, shown),
        "review_fmr": REVIEW_FMR,
        "threshold_at_review_fmr": threshold_for_fmr(impostor, REVIEW_FMR),
        "genuine_pairs": len(genuine),
        "impostor_pairs": len(impostor),
        "threshold": threshold,
        "fnmr": fnmr_at(genuine, threshold),
        "fmr": fmr_at(impostor, threshold),
        "target_fmr": target_fmr,
        "threshold_at_target_fmr": at_target,
        "fnmr_at_target_fmr": None if at_target is None else fnmr_at(genuine, at_target),
        "fmr_at_target_threshold": None if at_target is None else fmr_at(impostor, at_target),
        "fmr_resolution": fmr_resolution(len(impostor)),
        "eer": eer,
        "eer_threshold": eer_threshold,
        "genuine_score_min": float(genuine.min()) if len(genuine) else None,
        "impostor_score_max": float(impostor.max()) if len(impostor) else None,
    }


# -- presentation attacks --------------------------------------------------------------
BONA_FIDE = "bona_fide"


def pad_figures(outcomes: Sequence[tuple[str, bool]],
                injection: Sequence[str] = ()) -> dict:
    """APCER per attack type and BPCER from (label, accepted as live) per presentation;
    ``label`` is ``bona_fide`` or the attack's type. The worst APCER is the worst
    presentation attack's (ISO/IEC 30107-3); types in ``injection`` (frames made by
    software, outside 30107-3) have their worst apart."""
    by_label: dict[str, list[bool]] = {}
    for label, accepted in outcomes:
        by_label.setdefault(label, []).append(bool(accepted))
    bona = by_label.pop(BONA_FIDE, [])
    apcer = {kind: {"presentations": len(v), "accepted": sum(v),
                    "apcer": sum(v) / len(v),
                    "channel": "injection" if kind in injection else "presentation"}
             for kind, v in sorted(by_label.items())}
    worst = max((a["apcer"] for a in apcer.values() if a["channel"] == "presentation"),
                default=None)
    injected = max((a["apcer"] for a in apcer.values() if a["channel"] == "injection"),
                   default=None)
    return {
        "bona_fide": len(bona),
        "bona_fide_rejected": len(bona) - sum(bona),
        "bpcer": (len(bona) - sum(bona)) / len(bona) if bona else None,
        "attacks": sum(a["presentations"] for a in apcer.values()),
        "apcer_by_type": apcer,
        "apcer_max": worst,  # ISO/IEC 30107-3: the worst presentation attack type
        "apcer_injection_max": injected,
    }


# -- fraud scores ----------------------------------------------------------------------
def fraud_figures(scores: np.ndarray, labels: np.ndarray,
                  thresholds: Mapping[str, float]) -> dict:
    """ROC AUC, score quantiles per label, and the share of each label at or above each
    named threshold (the decision's review and reject thresholds)."""
    from sklearn.metrics import roc_auc_score

    scores, labels = np.asarray(scores, dtype=np.float64), np.asarray(labels).astype(int)
    both = len(set(labels.tolist())) == 2
    per_label = {}
    for value, name in ((0, "genuine"), (1, "fraud")):
        s = scores[labels == value]
        per_label[name] = {
            "cases": len(s),
            "quantiles": ({q: round(float(np.quantile(s, float(q))), 4)
                           for q in ("0.05", "0.25", "0.5", "0.75", "0.95")} if len(s) else {}),
            "at_or_above": {k: (float(np.mean(s >= t)) if len(s) else None)
                            for k, t in thresholds.items()},
        }
    return {"cases": len(scores),
            "roc_auc": float(roc_auc_score(labels, scores)) if both else None,
            "thresholds": dict(thresholds), **per_label}


def percent(value: float | None, digits: int = 1) -> str:
    """``0.0123`` -> ``1.2%``; None -> ``-``."""
    return "-" if value is None else f"{100 * value:.{digits}f}%"
