"""How well a reader read rendered documents: what was printed against what was read.

A :class:`DocumentCase` is one rendered, photographed document with what is printed
on it. :func:`score` compares one DOCUMENT (as ``document_ocr`` reports it, or as
``parse_mrz`` makes it from any reader's text lines) with the case and gives
integer tallies; :func:`rates` turns summed tallies into the reported rates:

- ``mrz_exact_rate``: documents whose MRZ lines, as reported, are the printed lines;
- ``fields_exact_rate``: documents whose every MRZ field is exact;
- ``field_accuracy``: exact fields over all fields of all documents;
- ``valid_rate``: documents whose MRZ reported ``valid: true`` (every printed MRZ is
  valid, except a tampered one's);
- ``valid_but_wrong``: documents reported valid whose MRZ is not what is printed, or is
  a tampered one (the failure that must never happen);
- ``tampered_flagged``: tampered documents (a digit under a check digit altered on the
  page) whose MRZ was reported not valid.

Only counts leave this module: never texts, names or numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kyc_tools.synthetic.document import (
    Degradation,
    alter_mrz_digit,
    printed_mrz,
    random_identity,
    render_document,
)

TALLIES = ("documents", "mrz_found", "mrz_exact", "fields_exact", "fields_correct",
           "fields_total", "valid", "valid_but_wrong", "tampered", "tampered_flagged")


@dataclass(frozen=True, eq=False)
class DocumentCase:
    """An encoded photo of a rendered document and what its MRZ says."""

    image: bytes
    kind: str  # td1 or td3
    mrz_lines: tuple[str, ...]
    fields: Mapping[str, Any]
    tampered: bool = False  # the printed MRZ has a digit altered: it must read invalid


def render_cases(count: int, portraits: Sequence[np.ndarray | None], seed: int = 7000,
                 degradation: Degradation | None = None, tampered: int = 0
                 ) -> list[DocumentCase]:
    """``count`` documents from seeded random identities, TD3 and TD1 in turn, each
    photographed with ``degradation`` (default: the default degradations: blur, noise,
    JPEG, rotation, perspective, uneven light); the last ``tampered`` of them with one
    digit under a check digit altered in the printed MRZ."""
    cases = []
    for i in range(count):
        rng = np.random.default_rng(seed + i)
        kind = "td1" if i % 2 else "td3"
        photo = portraits[i % len(portraits)] if portraits else None
        identity = random_identity(rng)
        altered = None
        if i >= count - tampered:
            altered, _ = alter_mrz_digit(printed_mrz(identity, kind), rng)
        doc = render_document(identity, kind, photo, degradation or Degradation(), rng,
                              mrz_lines=altered)
        cases.append(DocumentCase(doc.jpeg_bytes(), doc.kind, doc.mrz_lines, dict(doc.fields),
                                  altered is not None))
    return cases


def score(document: Mapping[str, Any], case: DocumentCase) -> dict[str, int]:
    """The tallies of one DOCUMENT read from ``case`` (see :data:`TALLIES`)."""
    mrz = document.get("mrz")
    fields = document.get("fields") or {}
    correct = sum(fields.get(name) == value for name, value in case.fields.items())
    exact = mrz is not None and tuple(mrz.get("lines", ())) == case.mrz_lines
    valid = mrz is not None and mrz.get("valid") is True
    return {
        "documents": 1,
        "mrz_found": int(mrz is not None),
        "mrz_exact": int(exact),
        "fields_exact": int(correct == len(case.fields)),
        "fields_correct": int(correct),
        "fields_total": len(case.fields),
        "valid": int(valid),
        "valid_but_wrong": int(valid and (case.tampered or not exact)),
        "tampered": int(case.tampered),
        "tampered_flagged": int(case.tampered and not valid),
    }


def rates(tallies: Mapping[str, int]) -> dict[str, float | None]:
    """Rates from summed tallies; None where nothing was read."""

    def share(part: str, whole: str) -> float | None:
        total = tallies.get(whole, 0)
        return round(tallies.get(part, 0) / total, 4) if total else None

    return {
        "mrz_exact_rate": share("mrz_exact", "documents"),
        "fields_exact_rate": share("fields_exact", "documents"),
        "field_accuracy": share("fields_correct", "fields_total"),
        "valid_rate": share("valid", "documents"),
    }
