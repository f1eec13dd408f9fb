"""The machine-readable zone layouts of ICAO Doc 9303 as tables, and its check digits.

Where each field sits, what kind of character it may hold and which check digit
covers which positions, for TD1 (3 x 30, Part 5), TD2 (2 x 36, Part 6), TD3
(2 x 44, Part 4) and the visas MRV-A (2 x 44) and MRV-B (2 x 36, Part 7); check
digits as in Part 3, section 4.9 (8th edition, 2021). Positions are 0-based here;
Doc 9303 counts from 1.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import cached_property

FILLER = "<"
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
DIGITS = "0123456789"
ALPHABET = frozenset(LETTERS + DIGITS + FILLER)
WEIGHTS = (7, 3, 1)
# The keys of DOCUMENT's `checks`, in the order Doc 9303 lists them.
CHECK_NAMES = ("document_number", "birth_date", "expiry_date", "optional_data", "composite")


class Kind(enum.Enum):
    """What a position may legally hold; drives the OCR correction (see mrz_correct)."""

    ALPHA = "alpha"  # A-Z and the filler: document code, state codes, names
    NUMERIC = "numeric"  # 0-9: dates
    ALNUM = "alnum"  # A-Z, 0-9 and the filler: document number, optional data
    SEX = "sex"  # M, F or the filler
    CHECK = "check"  # a check digit (the filler only where Doc 9303 allows one)


Span = tuple[int, int, int]  # (line, start, end), end exclusive


@dataclass(frozen=True)
class Field:
    name: str
    line: int
    start: int
    length: int
    kind: Kind

    @property
    def end(self) -> int:
        return self.start + self.length

    def text(self, lines: list[str]) -> str:
        return lines[self.line][self.start:self.end]


@dataclass(frozen=True)
class Check:
    """A check digit at `digit` (line, position) over the characters of `spans`, in order."""

    name: str
    spans: tuple[Span, ...]
    digit: tuple[int, int]

    def covers(self, line: int, position: int) -> bool:
        return (line, position) == self.digit or any(
            span_line == line and start <= position < end for span_line, start, end in self.spans)

    def data(self, lines: list[str]) -> str:
        return "".join(lines[line][start:end] for line, start, end in self.spans)


@dataclass(frozen=True)
class MrzFormat:
    name: str  # the DOCUMENT `format`: TD1, TD2, TD3, MRV-A, MRV-B
    line_count: int
    line_length: int
    document_codes: str  # the letters a document code may start with; the first is the default
    fields: tuple[Field, ...]
    checks: tuple[Check, ...]
    # Doc 9303 Parts 5 and 6, note j: a document number longer than 9 characters puts a
    # filler in place of its check digit and continues at the start of the optional data,
    # followed by its check digit and a filler.
    number_overflow: bool

    def field(self, name: str) -> Field:
        for field in self.fields:
            if field.name == name:
                return field
        raise KeyError(name)

    def has_field(self, name: str) -> bool:
        return any(field.name == name for field in self.fields)

    def check(self, name: str) -> Check | None:
        return next((check for check in self.checks if check.name == name), None)

    @cached_property
    def kinds(self) -> tuple[tuple[Kind, ...], ...]:
        """The kind of every position, line by line."""
        grid = [[Kind.ALNUM] * self.line_length for _ in range(self.line_count)]
        for field in self.fields:
            grid[field.line][field.start:field.end] = [field.kind] * field.length
        for check in self.checks:
            line, position = check.digit
            grid[line][position] = Kind.CHECK
        return tuple(tuple(row) for row in grid)


def char_value(char: str) -> int:
    """Doc 9303-3 4.9: 0-9 as themselves, A-Z as 10-35, the filler as 0."""
    if char in DIGITS:
        return ord(char) - ord("0")
    if char in LETTERS:
        return ord(char) - ord("A") + 10
    if char == FILLER:
        return 0
    raise ValueError(f"not an MRZ character: {char!r}")


def check_digit(text: str) -> int:
    """The check digit of `text`: weights 7, 3, 1 repeated, sum modulo 10."""
    return sum(char_value(char) * WEIGHTS[i % 3] for i, char in enumerate(text)) % 10


@dataclass(frozen=True)
class NumberLayout:
    """Where the document number and its check digit are on these particular lines."""

    number: str  # fillers kept
    check: Check
    optional_data: str  # what is left of the optional data field after an overflow


def number_layout(fmt: MrzFormat, lines: list[str]) -> NumberLayout:
    """The document number, its check and the optional data, following an overflow if any."""
    number_field = fmt.field("document_number")
    optional_field = fmt.field("optional_data")
    check = fmt.check("document_number")
    assert check is not None, fmt.name
    number = number_field.text(lines)
    optional = optional_field.text(lines)
    line, position = check.digit
    overflowing = (fmt.number_overflow and lines[line][position] == FILLER
                   and optional[:1] not in ("", FILLER))
    if not overflowing:
        return NumberLayout(number, check, optional)
    # The tail runs up to the first filler; its last character is the check digit.
    tail_length = optional.find(FILLER) if FILLER in optional else len(optional)
    if tail_length < 2:
        return NumberLayout(number, check, optional)
    tail_start = optional_field.start
    spans = ((number_field.line, number_field.start, number_field.end),
             (optional_field.line, tail_start, tail_start + tail_length - 1))
    digit = (optional_field.line, tail_start + tail_length - 1)
    return NumberLayout(number + optional[:tail_length - 1],
                        Check("document_number", spans, digit),
                        optional[tail_length + 1:])


def resolved_checks(fmt: MrzFormat, lines: list[str]) -> tuple[Check, ...]:
    """The format's checks with the document-number check moved where an overflow puts it."""
    layout = number_layout(fmt, lines)
    return tuple(layout.check if check.name == "document_number" else check
                 for check in fmt.checks)


def check_passes(check: Check, lines: list[str]) -> bool:
    line, position = check.digit
    digit = lines[line][position]
    data = check.data(lines)
    if check.name == "optional_data" and set(data) <= {FILLER} and digit in (FILLER, "0"):
        # Doc 9303-4 4.2.2.2, position 43: an unused personal number field may have
        # either a zero or a filler as its check digit.
        return True
    if digit not in DIGITS:
        return False
    try:
        return check_digit(data) == int(digit)
    except ValueError:
        return False


def evaluate_checks(fmt: MrzFormat, lines: list[str]) -> dict[str, bool | None]:
    """Every DOCUMENT check: True/False, None where the format has no such check digit."""
    results: dict[str, bool | None] = dict.fromkeys(CHECK_NAMES)
    for check in resolved_checks(fmt, lines):
        results[check.name] = check_passes(check, lines)
    return results


def _two_line_format(name: str, length: int, document_codes: str, optional_length: int, *,
                     optional_check: bool, composite: bool, number_overflow: bool) -> MrzFormat:
    """TD2, TD3 and the visas share their lower line up to the optional data."""
    optional_end = 28 + optional_length
    fields = (
        Field("document_code", 0, 0, 2, Kind.ALPHA),
        Field("issuing_state", 0, 2, 3, Kind.ALPHA),
        Field("name", 0, 5, length - 5, Kind.ALPHA),
        Field("document_number", 1, 0, 9, Kind.ALNUM),
        Field("nationality", 1, 10, 3, Kind.ALPHA),
        Field("birth_date", 1, 13, 6, Kind.NUMERIC),
        Field("sex", 1, 20, 1, Kind.SEX),
        Field("expiry_date", 1, 21, 6, Kind.NUMERIC),
        Field("optional_data", 1, 28, optional_length, Kind.ALNUM),
    )
    checks = [
        Check("document_number", ((1, 0, 9),), (1, 9)),
        Check("birth_date", ((1, 13, 19),), (1, 19)),
        Check("expiry_date", ((1, 21, 27),), (1, 27)),
    ]
    if optional_check:
        checks.append(Check("optional_data", ((1, 28, optional_end),), (1, optional_end)))
    if composite:
        last = length - 1
        checks.append(Check("composite", ((1, 0, 10), (1, 13, 20), (1, 21, last)), (1, last)))
    return MrzFormat(name, 2, length, document_codes, fields, tuple(checks), number_overflow)


TD1 = MrzFormat(
    "TD1", 3, 30, "IAC",
    fields=(
        Field("document_code", 0, 0, 2, Kind.ALPHA),
        Field("issuing_state", 0, 2, 3, Kind.ALPHA),
        Field("document_number", 0, 5, 9, Kind.ALNUM),
        Field("optional_data", 0, 15, 15, Kind.ALNUM),
        Field("birth_date", 1, 0, 6, Kind.NUMERIC),
        Field("sex", 1, 7, 1, Kind.SEX),
        Field("expiry_date", 1, 8, 6, Kind.NUMERIC),
        Field("nationality", 1, 15, 3, Kind.ALPHA),
        Field("optional_data_2", 1, 18, 11, Kind.ALNUM),
        Field("name", 2, 0, 30, Kind.ALPHA),
    ),
    checks=(
        Check("document_number", ((0, 5, 14),), (0, 14)),
        Check("birth_date", ((1, 0, 6),), (1, 6)),
        Check("expiry_date", ((1, 8, 14),), (1, 14)),
        Check("composite", ((0, 5, 30), (1, 0, 7), (1, 8, 15), (1, 18, 29)), (1, 29)),
    ),
    number_overflow=True,
)
TD2 = _two_line_format("TD2", 36, "IAC", 7, optional_check=False, composite=True,
                       number_overflow=True)
TD3 = _two_line_format("TD3", 44, "P", 14, optional_check=True, composite=True,
                       number_overflow=False)
MRV_A = _two_line_format("MRV-A", 44, "V", 16, optional_check=False, composite=False,
                         number_overflow=False)
MRV_B = _two_line_format("MRV-B", 36, "V", 8, optional_check=False, composite=False,
                         number_overflow=False)

FORMATS: dict[str, MrzFormat] = {fmt.name: fmt for fmt in (TD1, TD2, TD3, MRV_A, MRV_B)}


def format_for(line_count: int, line_length: int, first_char: str) -> MrzFormat | None:
    """The format of an MRZ of this shape; 'V' as the first character means a visa."""
    if line_count == 3 and line_length == 30:
        return TD1
    if line_count != 2:
        return None
    visa = first_char == "V"
    if line_length == 36:
        return MRV_B if visa else TD2
    if line_length == 44:
        return MRV_A if visa else TD3
    return None
