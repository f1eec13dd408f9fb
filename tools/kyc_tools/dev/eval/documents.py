"""``kyc eval documents``: what the served document path read against what is printed,
per version of one of its models (``ocr_rec`` by default, ``mrz_rec`` or ``ocr_det``), and
beside them the open peers asked for (``--peer rapidocr``: RapidOCR in process, its lines
read by the same ``parse_mrz``, without the recogniser's probabilities it has no mending).

Each document goes through ``document_ocr`` (the ensemble the customer's request takes)
one at a time, so the time per document is the latency one customer sees on an idle
server. The tallies are :mod:`kyc_tools.dev.eval.document_cases`'s (the bench's): MRZ found,
exact lines, exact fields, valid, genuine pages reported not valid (another photo asked
for, or rejected for a misread); plus per-field accuracy and check-digit failures, and
the tallies per kind of page (``by_kind_of_page``: the hard cases of
:data:`~kyc_tools.dev.eval.document_cases.CATEGORIES`, each from its printed MRZ).
Only counts and rates are reported: never a text that was read.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kyc_client.liveness import bytes_input
from kyc_tools.dev.eval import DOCUMENT_MODELS, metrics
from kyc_tools.dev.eval.calls import each, error_text
from kyc_tools.dev.eval.data import DocumentSample, read_documents
from kyc_tools.dev.eval.document_cases import DocumentCase, by_category, categories, rates, score
from kyc_tools.dev.eval.server import EvalServer, pick_versions

log = logging.getLogger(__name__)

ENTRY = "document_ocr"
VERSIONED = DOCUMENT_MODELS


def read_one(sample: DocumentSample, client: Any) -> tuple[dict, float]:
    """DOCUMENT of one sample and the seconds it took."""
    started = time.perf_counter()
    result = client.infer(ENTRY, [bytes_input("IMAGE", sample.path.read_bytes())])
    took = time.perf_counter() - started
    return json.loads(result.as_numpy("DOCUMENT")[0, 0]), took


def tally(samples: Sequence[DocumentSample], read: Sequence[tuple[dict, float] | Exception]
          ) -> dict[str, Any]:
    """The figures of one version from what it read."""
    totals: Counter[str] = Counter()
    field_right: Counter[str] = Counter()
    field_seen: Counter[str] = Counter()
    check_failures: Counter[str] = Counter()
    times, errors, scored = [], [], []
    failing_documents = 0
    for sample, outcome in zip(samples, read, strict=True):
        case = DocumentCase(b"", sample.kind, sample.mrz_lines, sample.fields, sample.tampered)
        if isinstance(outcome, Exception):
            errors.append({"document": sample.path.name, "error": error_text(outcome)})
            totals["documents"] += 1
            scored.append((categories(case), {"documents": 1}))
            continue
        document, took = outcome
        times.append(took)
        tallies = score(document, case)
        totals.update(tallies)
        scored.append((categories(case), tallies))
        fields = document.get("fields") or {}
        for name, value in sample.fields.items():
            field_seen[name] += 1
            field_right[name] += int(fields.get(name) == value)
        mrz = document.get("mrz")
        failed = [k for k, ok in ((mrz or {}).get("checks") or {}).items() if ok is False]
        check_failures.update(failed)
        failing_documents += bool(failed)
    documents = totals["documents"]
    return {
        "documents": documents,
        "mrz_read_rate": round(totals["mrz_found"] / documents, 4) if documents else None,
        **rates(totals),
        "field_accuracy_by_name": {n: round(field_right[n] / field_seen[n], 4)
                                   for n in sorted(field_seen)},
        "check_digit_failures": dict(sorted(check_failures.items())),
        "documents_with_check_failures": failing_documents,
        "valid_but_wrong": totals["valid_but_wrong"],
        "tampered": totals["tampered"],
        "tampered_flagged": totals["tampered_flagged"],
        "genuine_not_valid": totals["genuine_not_valid"],
        "genuine_not_valid_retake": totals["genuine_not_valid_retake"],
        "genuine_rejected_for_misread": totals["genuine_rejected_for_misread"],
        "by_kind_of_page": by_category(scored),
        "errors": errors,
        "seconds_per_document_p50": round(float(np.median(times)), 3) if times else None,
        "seconds_per_document_p95": (round(float(np.quantile(times, 0.95)), 3)
                                     if times else None),
    }


def run(root: Path, repository: Path, model: str = "ocr_rec",
        versions: Sequence[int] | None = None, peers: Sequence[str] = ()) -> dict[str, Any]:
    """The figures of ``kyc eval documents`` per version of ``model``, and per peer."""
    if model not in VERSIONED:
        raise ValueError(f"--model is one of {', '.join(VERSIONED)}")
    samples = read_documents(root)
    versions = pick_versions(repository, model, versions)
    result: dict[str, Any] = {"kind": "documents", "data": str(root),
                              "repository": str(repository), "model": model,
                              "documents": len(samples),
                              "kinds": dict(Counter(s.kind for s in samples)), "versions": {}}
    for version in versions:
        with EvalServer(repository, [ENTRY], model, version) as server, \
                server.client() as client:
            read = each(lambda s, c=client: read_one(s, c), samples, f"documents v{version}",
                        in_flight=1)
        figures = tally(samples, read)
        result["versions"][str(version)] = figures
        log.info("documents: %s version %d: MRZ exact %s, fields %s, %s s per document",
                 model, version, metrics.percent(figures["mrz_exact_rate"]),
                 metrics.percent(figures["field_accuracy"]), figures["seconds_per_document_p50"])
    result["peers"] = {peer: tally(samples, read_with_peer(peer, samples, repository))
                       for peer in peers}
    result["recommendation"] = recommend(result)
    return result


PEERS = {"rapidocr": "rapidocr-onnxruntime"}


def read_with_peer(peer: str, samples: Sequence[DocumentSample], repository: Path
                   ) -> list[tuple[dict, float] | Exception]:
    """DOCUMENT of each sample as ``peer`` reads it (in process, one page at a time: the
    bench's peer, :class:`kyc_tools.dev.bench.document.RapidOcrPeer`)."""
    from kyc_tools.dev.bench.document import RapidOcrPeer
    from kyc_tools.dev.bench.options import PeerUnavailableError

    if peer not in PEERS:
        raise ValueError(f"--peer is one of {', '.join(PEERS)}")
    try:
        engine = RapidOcrPeer(repository)
    except PeerUnavailableError as exc:
        raise ValueError(str(exc)) from None

    def read(sample: DocumentSample) -> tuple[dict, float]:
        started = time.perf_counter()
        document = engine.read(sample.path.read_bytes())
        return document, time.perf_counter() - started

    return each(read, samples, f"documents {peer}", in_flight=1)


def recommend(result: dict[str, Any]) -> str:
    """Which version reads best: MRZ exact rate, then field accuracy, then speed."""
    versions = result["versions"]

    def key(item: tuple[str, dict]) -> tuple[float, float, float]:
        v = item[1]
        return (-(v["mrz_exact_rate"] or 0.0), -(v["field_accuracy"] or 0.0),
                v["seconds_per_document_p50"] or float("inf"))

    ranked = sorted(versions.items(), key=key)
    best, figures = ranked[0]
    line = (f"{result['model']} version {best}: MRZ exact "
            f"{metrics.percent(figures['mrz_exact_rate'])}, field accuracy "
            f"{metrics.percent(figures['field_accuracy'])}, "
            f"{figures['seconds_per_document_p50']} s per document")
    if len(ranked) > 1:
        line += " (" + "; ".join(
            f"version {v}: {metrics.percent(f['mrz_exact_rate'])}, "
            f"{metrics.percent(f['field_accuracy'])}, {f['seconds_per_document_p50']} s"
            for v, f in ranked[1:]) + ")"
    return line
