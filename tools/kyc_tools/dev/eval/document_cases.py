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
  page) whose MRZ was reported not valid;
- ``genuine_not_valid``: genuine (not tampered) documents whose MRZ was found and
  reported not valid, split by what the decision does with them:
  ``genuine_not_valid_retake`` where the MRZ names the checks it may have ``misread``
  (another photo is asked for), ``genuine_rejected_for_misread`` where ``misread`` is
  empty or missing (rejected as ``mrz_check_failed``: the figure that must be 0).

:func:`categories` puts each case in the kinds of page that are hard to read, derived
from its printed MRZ alone (:data:`CATEGORIES`: its format, the kind of document number
an issuer prints, optional data with letters, short and cut names, tampered), and
:func:`by_category` sums :data:`CATEGORY_TALLIES` per kind of page.

Only counts leave this module: never texts, names or numbers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kyc.document.mrz_formats import FILLER, FORMATS, LETTERS, format_for, number_layout
from kyc_tools.dev.synthetic.document import (
    LOOKALIKES,
    Degradation,
    alter_mrz_digit,
    printed_mrz,
    random_identity,
    render_document,
)

TALLIES = ("documents", "mrz_found", "mrz_exact", "fields_exact", "fields_correct",
           "fields_total", "valid", "valid_but_wrong", "tampered", "tampered_flagged",
           "genuine_not_valid", "genuine_not_valid_retake", "genuine_rejected_for_misread")
# The tallies counted per kind of page.
CATEGORY_TALLIES = ("documents", "mrz_found", "mrz_exact", "fields_exact", "valid_but_wrong",
                    "genuine_not_valid", "genuine_not_valid_retake",
                    "genuine_rejected_for_misread")
KINDS = ("td1", "td2", "td3")  # the kinds render_cases draws, in turn
SEED = 7000  # render_cases' first page by default (the bench's, kyc eval samples' documents/)
FILLER_RUN = 20  # a name this many fillers shorter than its field, or more, is a short one

# The kinds of page counted in their own rows, in the report's order, with their words.
CATEGORIES: dict[str, str] = {
    **{fmt.name: f"{fmt.name} ({fmt.line_count} x {fmt.line_length})"
       for fmt in FORMATS.values()},
    "number_lookalike": f"document number with a look-alike letter ({' '.join(LOOKALIKES)})",
    "number_alphanumeric_no_lookalike": "document number with letters, no look-alike",
    "number_digits_only": "document number of digits only",
    "optional_data_letters": "optional data with letters",
    "name_filler_run": f"name with a run of {FILLER_RUN} or more fillers",
    "name_cut": "name cut to the line",
    "tampered": "tampered",
}


@dataclass(frozen=True, eq=False)
class DocumentCase:
    """An encoded photo of a rendered document and what its MRZ says."""

    image: bytes
    kind: str  # td1, td2 or td3 (3 x 30, 2 x 36, 2 x 44), as render_document draws
    mrz_lines: tuple[str, ...]
    fields: Mapping[str, Any]
    tampered: bool = False  # the printed MRZ has a digit altered: it must read invalid


def render_cases(count: int, portraits: Sequence[np.ndarray | None], seed: int = SEED,
                 degradation: Degradation | None = None, tampered: int = 0
                 ) -> list[DocumentCase]:
    """``count`` documents from seeded random identities (seed ``seed + i`` for the
    ``i``-th), TD1, TD2 and TD3 in turn, each photographed with ``degradation`` (default:
    the default degradations: blur, noise, JPEG, rotation, perspective, uneven light);
    the last ``tampered`` of them with one digit under a check digit altered in the
    printed MRZ."""
    cases = []
    for i in range(count):
        rng = np.random.default_rng(seed + i)
        kind = KINDS[i % len(KINDS)]
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
    genuine_not_valid = mrz is not None and not valid and not case.tampered
    retake = genuine_not_valid and bool(mrz.get("misread"))  # missing: an older reader
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
        "genuine_not_valid": int(genuine_not_valid),
        "genuine_not_valid_retake": int(retake),
        "genuine_rejected_for_misread": int(genuine_not_valid and not retake),
    }


def categories(case: DocumentCase) -> tuple[str, ...]:
    """The kinds of page of :data:`CATEGORIES` that ``case`` is, from what is printed on it:
    its MRZ format; its document number (overflow included, fillers left out) with a
    letter that looks like a digit, with letters but none of those, or of digits only;
    optional data with a letter; a name field with a run of :data:`FILLER_RUN` fillers or
    more (a short name), or full to its last character (a name cut to the line);
    tampered. Lines of no MRZ format give only ``tampered``, where it is."""
    lines = list(case.mrz_lines)
    fmt = (format_for(len(lines), len(lines[0]), lines[0][:1])
           if lines and len({len(line) for line in lines}) == 1 else None)
    found = []
    if fmt is not None:
        layout = number_layout(fmt, lines)
        number = layout.number.replace(FILLER, "")
        optional = layout.optional_data + "".join(
            f.text(lines) for f in fmt.fields if f.name == "optional_data_2")
        name = fmt.field("name").text(lines)
        found.append(fmt.name)
        if any(char in LOOKALIKES for char in number):
            found.append("number_lookalike")
        elif any(char in LETTERS for char in number):
            found.append("number_alphanumeric_no_lookalike")
        elif number:
            found.append("number_digits_only")
        if any(char in LETTERS for char in optional):
            found.append("optional_data_letters")
        if FILLER * FILLER_RUN in name:
            found.append("name_filler_run")
        if not name.endswith(FILLER):
            found.append("name_cut")
    if case.tampered:
        found.append("tampered")
    return tuple(found)


def by_category(scored: Iterable[tuple[Sequence[str], Mapping[str, int]]]
                ) -> dict[str, dict[str, int]]:
    """:data:`CATEGORY_TALLIES` summed per kind of page, from each document's categories
    and tallies (a document that could not be read: ``{"documents": 1}``); the kinds met,
    in :data:`CATEGORIES`' order."""
    sums: dict[str, Counter[str]] = {}
    for kinds, tallies in scored:
        for kind in kinds:
            sums.setdefault(kind, Counter()).update(
                {k: int(tallies.get(k, 0)) for k in CATEGORY_TALLIES})
    return {kind: {k: sums[kind][k] for k in CATEGORY_TALLIES}
            for kind in CATEGORIES if kind in sums}


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
