"""Read and write machine-readable zones (ICAO Doc 9303): the `document_ocr` DOCUMENT.

`parse_mrz(lines)` takes the recognised text lines of a document, finds the MRZ
(mrz_find), corrects OCR confusions by field type (mrz_correct: the rules that
keep an altered digit visible are there), verifies every check digit and reads
the fields. `compose_mrz` is its inverse, for rendering test documents.

Dates are YYMMDD; the century is chosen relative to `today`:
- birth: the latest date not after today (a birth date is in the past);
- expiry: the year in [today - 49 years, today + 50 years] (documents are issued
  for at most about ten years; a century away in either direction is absurd).
An impossible date (month 13, 30 February) gives a null field, its check digit is
still reported, and the MRZ is not valid.

Nothing here logs: the fields are personal data.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Mapping, Sequence
from datetime import date
from typing import Any

from kyc.document.ctc_length import LazyOptions, Options
from kyc.document.mrz_correct import correct
from kyc.document.mrz_find import MrzCandidate, find_mrz, normalise
from kyc.document.mrz_formats import (
    CHECK_NAMES,
    DIGITS,
    FILLER,
    FORMATS,
    LETTERS,
    MrzFormat,
    check_digit,
    evaluate_checks,
    number_layout,
)
from kyc.document.mrz_mend import mend
from kyc.document.mrz_sure import NAME, NAME_UNSURE, check_failed, misread_checks, name_unsure
from kyc.document.states import known_state
from kyc.document.visual import squash

# A line's characters as the recogniser offered them, or a function that works them out
# (DocumentReader's lines: only a failing check asks); None where not known.
OptionsGiven = Options | LazyOptions | None

__all__ = ["FORMATS", "check_digit", "compose_mrz", "empty_document", "find_mrz", "parse_mrz",
           "read_mrz"]

FIELD_NAMES = ("document_code", "issuing_state", "surname", "given_names", "document_number",
               "nationality", "birth_date", "sex", "expiry_date", "optional_data",
               "optional_data_2")
SEX_FROM_MRZ = {"M": "M", "F": "F", "X": "X", FILLER: "X"}
EXPIRY_YEARS_BACK = 49
NUMBER_LENGTH = 9


def empty_document() -> dict[str, Any]:
    """DOCUMENT when no MRZ was found: every field null."""
    return {"mrz": None, "fields": dict.fromkeys(FIELD_NAMES), "expired": None}


def parse_mrz(lines: Sequence[str], today: date | None = None,
              options: Sequence[OptionsGiven] | None = None,
              visual: Sequence[str] = ()) -> dict[str, Any]:
    """DOCUMENT (see the contract) from the recognised text lines of a document, MRZ or
    not; ``options``, one per line where known, the recogniser's choices for each of its
    characters, and ``visual``, the page's visual-zone lines, for mending the check
    digits that fail (:mod:`kyc.document.mrz_mend`)."""
    candidate = find_mrz(lines)
    if candidate is None:
        return empty_document()
    return read_mrz(candidate, today, _line_options(candidate, lines, options), visual)


def _line_options(candidate: MrzCandidate, lines: Sequence[str],
                  options: Sequence[OptionsGiven] | None) -> list[OptionsGiven]:
    """The options of each MRZ line that is one input line as read (not joined, not
    fitted to its length)."""
    if options is None or len(candidate.indices) != len(candidate.lines):
        return [None] * len(candidate.lines)
    return [options[index] if normalise(lines[index]) == line else None
            for index, line in zip(candidate.indices, candidate.lines, strict=True)]


def read_mrz(candidate: MrzCandidate, today: date | None = None,
             options: Sequence[OptionsGiven] = (), visual: Sequence[str] = ()
             ) -> dict[str, Any]:
    """DOCUMENT from an MRZ found by find_mrz; ``visual``: the page's other lines, which
    must show a document number a mend changed."""
    today = today or date.today()
    fmt = candidate.format
    lines, corrections = correct(fmt, list(candidate.lines))
    checks, mended = evaluate_checks(fmt, lines), 0
    if any(ok is False for ok in checks.values()):  # only then: the mend's search
        lines, mended = mend(fmt, lines, options, _acceptable(fmt, lines, today, visual))
        checks = evaluate_checks(fmt, lines)
    fields = _fields(fmt, lines, today)
    problems = [check_failed(name) for name in CHECK_NAMES if checks[name] is False]
    problems += [f"{name}_invalid" for name in ("birth_date", "expiry_date")
                 if fields[name] is None]
    problems += [f"{name}_unknown" for name in ("issuing_state", "nationality")
                 if not known_state(fields[name])]
    misread = misread_checks(fmt, lines, options, checks)
    if name_unsure(fmt, lines, options):  # no check digit covers a name: it is not valid
        problems.append(NAME_UNSURE)
        misread.append(NAME)
    expiry = fields["expiry_date"]
    return {
        "mrz": {
            "format": fmt.name,
            "lines": lines,
            "valid": not problems,
            "checks": checks,
            # Extensions of the contract: why it is not valid, how much OCR was undone by
            # field type, and how many characters the check digits chose among the
            # recogniser's own second choices; which problems may be misreads, not edits:
            # failing checks over a character read in doubt (unsure, another legal choice
            # offered), and "name" for a name letter read unsure where a filler was
            # offered (kyc.document.mrz_sure).
            "problems": problems,
            "corrections": corrections,
            "mended": mended,
            "misread": misread,
        },
        "fields": fields,
        "expired": None if expiry is None else date.fromisoformat(expiry) < today,
    }


def _acceptable(fmt: MrzFormat, lines: list[str], today: date, visual: Sequence[str]
                ) -> Callable[[list[str]], bool]:
    """Whether a mended reading of ``lines`` may be taken: its dates are real, and a
    document number it changed is the one the visual zone shows."""
    number = _fields(fmt, lines, today)["document_number"]
    shown = squash(" ".join(visual))

    def acceptable(trial: list[str]) -> bool:
        fields = _fields(fmt, trial, today)
        real = fields["birth_date"] is not None and fields["expiry_date"] is not None
        return real and (fields["document_number"] == number or bool(
            shown and squash(fields["document_number"]) in shown))

    return acceptable


def _fields(fmt: MrzFormat, lines: list[str], today: date) -> dict[str, Any]:
    def text(name: str) -> str:
        return fmt.field(name).text(lines)

    layout = number_layout(fmt, lines)
    surname, given_names = split_name(text("name"))
    birth = birth_date(text("birth_date"), today)
    expiry = expiry_date(text("expiry_date"), today)
    return {
        "document_code": text("document_code").rstrip(FILLER),
        "issuing_state": text("issuing_state").rstrip(FILLER),
        "surname": surname,
        "given_names": given_names,
        "document_number": layout.number.rstrip(FILLER),
        "nationality": text("nationality").rstrip(FILLER),
        "birth_date": birth and birth.isoformat(),
        "sex": SEX_FROM_MRZ.get(text("sex")),
        "expiry_date": expiry and expiry.isoformat(),
        "optional_data": layout.optional_data.strip(FILLER),
        "optional_data_2": (text("optional_data_2").strip(FILLER)
                            if fmt.has_field("optional_data_2") else None),
    }


def split_name(name: str) -> tuple[str, str]:
    """(surname, given names): split at the first '<<', '<' as a space."""
    primary, _, secondary = name.strip(FILLER).partition(FILLER * 2)
    return _words(primary), _words(secondary)


def _words(text: str) -> str:
    return " ".join(part for part in text.split(FILLER) if part)


def _yymmdd(text: str) -> tuple[int, int, int] | None:
    if len(text) != 6 or any(char not in DIGITS for char in text):
        return None
    return int(text[:2]), int(text[2:4]), int(text[4:])


def _date(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def birth_date(text: str, today: date) -> date | None:
    """The latest date with these YYMMDD that is not after `today`."""
    parts = _yymmdd(text)
    if parts is None:
        return None
    yy, month, day = parts
    year = today.year - (today.year - yy) % 100
    if (year, month, day) > (today.year, today.month, today.day):
        year -= 100
    return _date(year, month, day)


def expiry_date(text: str, today: date) -> date | None:
    """The date with these YYMMDD whose year is in [today - 49, today + 50]."""
    parts = _yymmdd(text)
    if parts is None:
        return None
    yy, month, day = parts
    first = today.year - EXPIRY_YEARS_BACK
    return _date(first + (yy - first) % 100, month, day)


# --- composing -------------------------------------------------------------------------------


def compose_mrz(format_name: str, fields: Mapping[str, Any]) -> list[str]:
    """The MRZ lines of a document, check digits included: the inverse of parse_mrz.

    `fields` as parse_mrz reports them (dates as YYYY-MM-DD or date objects, sex
    M/F/X); names are transliterated to A-Z (accents dropped, apostrophes removed,
    spaces and hyphens as '<') and cut to the field when too long. A document number
    longer than 9 characters overflows into the optional data on TD1 and TD2.
    """
    fmt = FORMATS[format_name]
    grid = [[FILLER] * fmt.line_length for _ in range(fmt.line_count)]
    number, optional, overflow = _number_and_optional(fmt, fields)
    values = {
        "document_code": fields.get("document_code") or fmt.document_codes[0],
        "issuing_state": fields["issuing_state"],
        "name": encode_name(fields["surname"], fields.get("given_names") or ""),
        "document_number": number,
        "nationality": fields["nationality"],
        "birth_date": _yymmdd_text(fields["birth_date"]),
        "sex": {"M": "M", "F": "F"}.get(fields.get("sex") or "", FILLER),
        "expiry_date": _yymmdd_text(fields["expiry_date"]),
        "optional_data": optional,
        "optional_data_2": _mrz_text(fields.get("optional_data_2") or ""),
    }
    for field in fmt.fields:
        value = _mrz_text(values[field.name])
        if field.name == "name":
            value = value[:field.length]
        if len(value) > field.length:
            raise ValueError(f"{field.name} does not fit in {field.length} characters")
        grid[field.line][field.start:field.start + len(value)] = list(value)
    _write_check_digits(fmt, grid, overflow=overflow)
    return ["".join(row) for row in grid]


def _number_and_optional(fmt: MrzFormat, fields: Mapping[str, Any]) -> tuple[str, str, bool]:
    """(document number field, optional data field, whether the number overflows)."""
    number = _mrz_text(fields["document_number"])
    optional = _mrz_text(fields.get("optional_data") or "")
    if len(number) <= NUMBER_LENGTH:
        return number, optional, False
    if not fmt.number_overflow:
        raise ValueError(f"{fmt.name} has no room for a document number over 9 characters")
    tail = number[NUMBER_LENGTH:]
    return number[:NUMBER_LENGTH], f"{tail}{check_digit(number)}{FILLER}{optional}", True


def _write_check_digits(fmt: MrzFormat, grid: list[list[str]], *, overflow: bool) -> None:
    """Field checks first, the composite last: it covers them."""
    for check in fmt.checks:
        line, position = check.digit
        if check.name == "document_number" and overflow:
            continue  # the filler stays; the overflow tail carries the check digit
        lines = ["".join(row) for row in grid]
        grid[line][position] = str(check_digit(check.data(lines)))


def _yymmdd_text(value: date | str) -> str:
    day = value if isinstance(value, date) else date.fromisoformat(value)
    return day.strftime("%y%m%d")


def _mrz_text(value: str) -> str:
    """A-Z, 0-9 and fillers: accents dropped, spaces and hyphens as fillers."""
    plain = unicodedata.normalize("NFKD", str(value)).encode("ascii", "ignore").decode()
    plain = plain.upper().replace("'", "")
    return "".join(char if char in LETTERS or char in DIGITS else FILLER for char in plain)


def encode_name(surname: str, given_names: str) -> str:
    primary = _mrz_text(surname.strip())
    secondary = _mrz_text(given_names.strip())
    return f"{primary}{FILLER * 2}{secondary}" if secondary else primary
