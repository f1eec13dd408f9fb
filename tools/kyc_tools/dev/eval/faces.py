"""``kyc eval faces``: genuine and impostor pairs through the served face path, per version.

Each image goes once through ``face_preprocess`` (detection, alignment: the path the
ensemble takes), each found face once through each version of ``face_embedding``; a
pair's score is the cosine of its two embeddings (the decision's face_match_score),
so N images cost N + N x versions requests, not one per pair.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kyc.face.match import MATCH_KEY, FaceThresholds
from kyc_client.liveness import bytes_input
from kyc_tools.dev.eval import MEASURED, metrics
from kyc_tools.dev.eval.calls import array_input, each, error_text
from kyc_tools.dev.eval.data import FaceImage, read_faces
from kyc_tools.dev.eval.server import EvalServer, pick_versions

log = logging.getLogger(__name__)

PREPROCESS, EMBEDDING = "face_preprocess", MEASURED["faces"]
LISTED_PAIRS = 20  # failing pairs named in the report, per kind and version


def detect(server: EvalServer, images: Sequence[FaceImage]) -> list[np.ndarray | str]:
    """Each image's aligned face ([112, 112, 3] uint8), or why there is none."""
    with server.client() as client:

        def one(image: FaceImage) -> np.ndarray | str:
            result = client.infer(PREPROCESS, [bytes_input("IMAGE", image.path.read_bytes())])
            if not bool(result.as_numpy("FACE_FOUND")[0, 0]):
                return "no face found"
            return result.as_numpy("FACE")[0]

        found = each(one, images, "faces")
    return [f"error: {error_text(r)}" if isinstance(r, Exception) else r for r in found]


def embed(server: EvalServer, faces: Sequence[np.ndarray], version: int,
          batch: int) -> np.ndarray:
    """The embeddings of ``faces`` by ``version``, ``batch`` faces a request."""
    chunks = [np.stack(faces[k:k + batch]) for k in range(0, len(faces), batch)]
    with server.client() as client:

        def one(chunk: np.ndarray) -> np.ndarray:
            result = client.infer(EMBEDDING, [array_input("FACE", chunk, "UINT8")],
                                  model_version=str(version))
            return result.as_numpy("EMBEDDING")

        out = each(one, chunks, f"embeddings v{version}", in_flight=2)
    failed = [r for r in out if isinstance(r, Exception)]
    if failed:
        raise RuntimeError(f"{EMBEDDING} version {version}: {error_text(failed[0])}")
    return np.concatenate(out)  # type: ignore[arg-type]


def failing_pairs(pairs: metrics.Pairs, images: Sequence[FaceImage],
                  threshold: float) -> dict[str, list[dict[str, Any]]]:
    """The genuine pairs below ``threshold`` and impostor pairs at or above it, worst
    first, by file name."""

    def listed(scores: np.ndarray, index: Sequence[tuple[int, int]], bad: np.ndarray,
               worst_first: int) -> list[dict[str, Any]]:
        order = np.argsort(worst_first * scores)
        return [{"a": images[index[k][0]].name, "b": images[index[k][1]].name,
                 "score": round(float(scores[k]), 4)} for k in order if bad[k]][:LISTED_PAIRS]

    return {"genuine_rejected": listed(pairs.genuine, pairs.genuine_index,
                                       pairs.genuine < threshold, +1),
            "impostor_accepted": listed(pairs.impostor, pairs.impostor_index,
                                        pairs.impostor >= threshold, -1)}


def run(root: Path, repository: Path, versions: Sequence[int] | None = None,
        target_fmr: float = 1e-4, served: int | None = None) -> dict[str, Any]:
    """Every figure of ``kyc eval faces`` (see :func:`kyc_tools.dev.eval.metrics.face_figures`) per
    version, the faces not found, and the failing pairs; ``served``: the version the
    others must beat by more than chance to be recommended (:func:`recommend`)."""
    images = read_faces(root)
    versions = pick_versions(repository, EMBEDDING, versions)
    people = [i.person for i in images]
    result: dict[str, Any] = {
        "kind": "faces", "data": str(root), "repository": str(repository),
        "model": EMBEDDING, "images": len(images), "people": len(set(people)),
        "threshold_parameter": f"{EMBEDDING}/config.pbtxt: {MATCH_KEY}", "versions": {},
    }
    found: list[np.ndarray | str] = []
    for version in versions:
        with EvalServer(repository, [PREPROCESS, EMBEDDING], EMBEDDING, version) as server:
            if not found:  # the face path does not depend on the embedding's version
                started = time.perf_counter()
                found = detect(server, images)
                result["detect_s"] = round(time.perf_counter() - started, 3)
                faces = FaceThresholds.from_parameters(server.parameters(EMBEDDING))
                result["threshold"], result["review_threshold"] = faces.match, faces.review
            usable = [not isinstance(f, str) for f in found]
            faces = [f for f in found if not isinstance(f, str)]
            batch = int(server.config(EMBEDDING).get("max_batch_size", 1)) or 1
            started = time.perf_counter()
            embeddings = embed(server, faces, version, batch)
            embed_s = time.perf_counter() - started
        threshold = result["threshold"]
        scores = np.full((len(images), len(images)), np.nan)
        kept = [k for k, ok in enumerate(usable) if ok]
        scores[np.ix_(kept, kept)] = metrics.cosine_matrix(embeddings)
        pairs = metrics.pair_scores(scores, people, usable)
        figures = metrics.face_figures(pairs.genuine, pairs.impostor, threshold, target_fmr,
                                       result["review_threshold"])
        listed = _listing_threshold(figures, version, served)
        result["versions"][str(version)] = {
            **figures, "embedding_dims": int(embeddings.shape[1]),
            "embed_s": round(embed_s, 3), "failing_at": listed,
            "failing_pairs": failing_pairs(pairs, images, listed),
            "_genuine": pairs.genuine, "_impostor": pairs.impostor,
        }
        log.info("faces: version %d: %d genuine, %d impostor pairs, FNMR %s FMR %s at %.3f",
                 version, figures["genuine_pairs"], figures["impostor_pairs"],
                 metrics.percent(figures["fnmr"]), metrics.percent(figures["fmr"]), threshold)
    result["faces_found"] = sum(1 for f in found if not isinstance(f, str))
    result["not_found"] = [{"image": i.name, "why": f} for i, f in zip(images, found, strict=True)
                           if isinstance(f, str)]
    result["recommendation"] = recommend(result, served)
    return result


def _listing_threshold(figures: dict, version: int, served: int | None) -> float:
    """Where a version's failing pairs are listed: the configured threshold belongs to the
    served weights; another version's are listed at the threshold its own pairs show."""
    if served is None or version == served:
        return figures["threshold"]
    return (figures["threshold_at_fmr_bound"] or figures["threshold_at_target_fmr"]
            or figures["threshold"])


def impostor_pairs_needed(target_fmr: float) -> int:
    """Impostor pairs that can show FMR <= ``target_fmr`` with 95% confidence when none
    is accepted (the rule of three: 3 / n is the upper bound of a zero count)."""
    return int(np.ceil(3.0 / target_fmr))


def recommend(result: dict[str, Any], served: int | None = None) -> str:
    """One line: which version to serve at the target FMR, and the threshold to set. A
    version beats ``served`` only when it refuses fewer genuine pairs by more than chance
    (:func:`kyc_tools.dev.eval.metrics.mcnemar_p` on the same pairs, p < 0.05)."""
    versions = result["versions"]
    if not versions:
        return "nothing measured"
    target = next(iter(versions.values()))["target_fmr"]

    def fnmr(v: dict) -> float | None:  # at the threshold the data shows, else the estimate
        return v["fnmr_at_fmr_bound"] if v["threshold_at_fmr_bound"] is not None \
            else v["fnmr_at_target_fmr"]

    def key(item: tuple[str, dict]) -> tuple[float, float, bool, int]:
        v = item[1]  # on a tie, the served version, else the newest
        return (fnmr(v) if fnmr(v) is not None else 1.0,
                v["eer"] if v["eer"] is not None else 1.0, item[0] != str(served),
                -int(item[0]))

    ranked = sorted(versions.items(), key=key)
    best, figures = ranked[0]
    kept = _within_chance(versions, best, served)
    if kept:
        best, figures = str(served), versions[str(served)]
        ranked = [(best, figures), *[r for r in ranked if r[0] != best]]
    line = f"version {best}"
    if len(ranked) > 1:
        others = ", ".join(f"version {v}: {metrics.percent(fnmr(f))}" for v, f in ranked[1:])
        line += f": FNMR {metrics.percent(fnmr(figures))} at FMR {target:g} ({others})"
    else:
        line += f": FNMR {metrics.percent(fnmr(figures))} at FMR {target:g}"
    line += kept
    return line + _threshold_advice(result, figures, target)


def _within_chance(versions: dict[str, dict], best: str, served: int | None) -> str:
    """Why ``served`` stays although ``best`` refused fewer genuine pairs, or "" when
    ``best`` is ``served`` or beats it by more than chance."""
    if served is None or str(served) not in versions or best == str(served):
        return ""
    old, new = versions[str(served)], versions[best]
    if old.get("threshold_at_fmr_bound") is None or new.get("threshold_at_fmr_bound") is None:
        return ""
    old_refused = old["_genuine"] < old["threshold_at_fmr_bound"]
    new_refused = new["_genuine"] < new["threshold_at_fmr_bound"]
    p = metrics.mcnemar_p(int(np.sum(old_refused & ~new_refused)),
                          int(np.sum(new_refused & ~old_refused)))
    if p < 0.05:
        return ""
    return (f"; version {served}, served, stays: version {best} refuses "
            f"{int(new_refused.sum())} of {len(new_refused)} genuine pairs against "
            f"{int(old_refused.sum())}, within chance (McNemar p = {p:.2f})")


def _threshold_advice(result: dict[str, Any], figures: dict, target: float) -> str:
    shown, at = figures["threshold_at_fmr_bound"], figures["threshold_at_target_fmr"]
    if shown is not None:
        line = (f"; threshold to set: {shown:.3f}, where these pairs show FMR <= {target:g} "
                f"at 95% confidence (FNMR {metrics.percent(figures['fnmr_at_fmr_bound'])}; "
                f"{result['threshold_parameter']}, now {figures['threshold']:g})")
        review = figures["threshold_at_review_fmr"]
        if review is not None and review < shown:
            line += (f"; review_threshold {review:.3f}, where {figures['review_fmr']:g} of "
                     "impostors reach")
        return line
    if at is not None:
        return (f"; keep the threshold ({figures['threshold']:g}): {figures['impostor_pairs']} "
                f"impostor pairs cannot show FMR {target:g}, which takes at least "
                f"{impostor_pairs_needed(target)} (the rule of three; here no impostor is "
                f"accepted from {at:.3f} up)")
    return ""
