"""Find the MRZ among recognised text lines and bring its lines to their exact length.

OCR output is messy in known ways: spaces inside a line, lowercase, '«' for '<<',
a line cut into two boxes, and, with CTC recognisers, fillers lost or doubled in
runs of '<' (the trailing padding of a name line can come back half as long).

A text line is MRZ-like when, normalised, at least 85% of it is [A-Z0-9<]. An MRZ
is 3 consecutive lines of 30 characters, or 2 of 36 or of 44, each made of one
MRZ-like line or two consecutive ones joined, and each within 3 characters of the
length or shorter but ending in padding ('<<<'); at least one of them within 3.
Every such window is corrected and checked, and the one with the most passing
check digits wins (then the smallest length fix, then the lowest on the page).

A line ending in padding that is too short is padded with fillers at its end:
fillers weigh 0 in every check digit and only padding follows. A line within 3
is fitted by adding or removing fillers in its runs of fillers, or dropping a
stray first or last character (or putting a filler in place of a lost first
one), keeping the reading that passes the most check digits of that line and
puts the fewest characters where their field cannot have them; between equals,
an edit of padding (the longest runs first) beats one at the ends, which beats
one of the single or double fillers that separate names and fields. A line read
at its exact length is never touched: a length fix only follows an OCR slip, it
cannot hide an altered character.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from kyc.document.mrz_correct import correct
from kyc.document.mrz_formats import (
    ALPHABET,
    DIGITS,
    FILLER,
    FORMATS,
    LETTERS,
    Kind,
    MrzFormat,
    check_passes,
    evaluate_checks,
    format_for,
    resolved_checks,
)

LENGTHS = {fmt.line_length: fmt.line_count for fmt in FORMATS.values()}  # 30: 3, 36: 2, 44: 2
TOLERANCE = 3
MIN_MRZ_SHARE = 0.85
MIN_FRAGMENT = 5
MIN_PLAIN_FRAGMENT = 15
PADDING_RUN = 3  # a run this long is padding; shorter ones separate names or fields
# Glyphs OCR gives for fillers; '«' is two of them.
GLYPHS = {"«": "<<", "≪": "<<", "‹": "<", "〈": "<", "＜": "<", "(": "<", "[": "<", "{": "<"}
# Fields that start with a letter, never with a filler.
LETTER_FIRST = ("document_code", "issuing_state", "nationality", "name")
LEGAL = {
    Kind.ALPHA: frozenset(LETTERS + FILLER),
    Kind.NUMERIC: frozenset(DIGITS),
    Kind.ALNUM: ALPHABET,
    Kind.SEX: frozenset("MFX" + FILLER),
    Kind.CHECK: frozenset(DIGITS + FILLER),
}


@dataclass(frozen=True)
class MrzCandidate:
    format: MrzFormat
    lines: tuple[str, ...]  # normalised and at the exact length; not yet corrected
    indices: tuple[int, ...]  # the input lines they came from (two for a line read in two boxes)


def normalise(text: str) -> str:
    """Uppercase, no spaces, filler glyphs as '<'."""
    return "".join(GLYPHS.get(char, char) for char in text.upper() if not char.isspace())


def mrz_share(text: str) -> float:
    return sum(char in ALPHABET for char in text) / len(text) if text else 0.0


def find_mrz(lines: Sequence[str]) -> MrzCandidate | None:
    """The consecutive lines that make the best MRZ, or None.

    Best: the most check digits passing once corrected, then the fewest characters
    where their field cannot have them, then the smallest length fix, then the
    lowest on the page (the MRZ is at the bottom).
    """
    pieces = _mrz_pieces(lines)
    best: tuple[tuple[int, ...], MrzCandidate] | None = None
    for start in range(len(pieces)):
        for length, count in LENGTHS.items():
            for window in _windows(pieces, start, count, length):
                found = _window_candidate(window, length)
                if found is None:
                    continue
                candidate, fixed = found
                score = (*_plausibility(candidate), -fixed, start)
                if best is None or score > best[0]:
                    best = (score, candidate)
    return None if best is None else best[1]


Piece = tuple[str, tuple[int, ...]]  # normalised text, the input lines it comes from


def _mrz_pieces(lines: Sequence[str]) -> list[Piece]:
    """The lines that look like MRZ text, normalised, with their input indices."""
    pieces = []
    for index, raw in enumerate(lines):
        text = normalise(raw)
        if len(text) >= MIN_FRAGMENT and mrz_share(text) >= MIN_MRZ_SHARE:
            pieces.append(("".join(char for char in text if char in ALPHABET), (index,)))
    return pieces


def _windows(pieces: list[Piece], start: int, count: int, length: int) -> Iterator[list[Piece]]:
    """`count` MRZ lines from `start` on, each one piece or two consecutive ones (a line the
    detector cut in two boxes) that together have the length."""
    if count == 0:
        yield []
        return
    for take in (1, 2):
        group = pieces[start:start + take]
        if len(group) < take or (take == 2 and not _joinable(group, length)):
            continue
        text = "".join(text for text, _ in group)
        if _near(text, length) or _truncated(text, length):
            line = (text, tuple(index for _, indices in group for index in indices))
            for rest in _windows(pieces, start + take, count - 1, length):
                yield [line, *rest]


def _near(text: str, length: int) -> bool:
    return abs(len(text) - length) <= TOLERANCE


def _truncated(text: str, length: int) -> bool:
    """A line whose long trailing padding the recogniser cut short (CTC drops repeats),
    or the detector split off (measured: "P<ITAMARTIN<<ZOE<<<<<", 21 of 44)."""
    return length // 3 <= len(text) < length and text.endswith(FILLER * PADDING_RUN)


def _joinable(group: list[Piece], length: int) -> bool:
    (first, first_indices), (second, second_indices) = group
    if second_indices[0] != first_indices[-1] + 1 or _near(first, length):
        return False
    # A fragment of a cut line has a filler or is long: short words of the visual zone
    # ("UTOPIA", a document number) are not glued to the MRZ.
    return all(FILLER in piece or len(piece) >= MIN_PLAIN_FRAGMENT for piece in (first, second))


def _window_candidate(window: list[Piece], length: int) -> tuple[MrzCandidate, int] | None:
    texts = [text for text, _ in window]
    if not any(_near(text, length) for text in texts):
        return None
    fmt = format_for(len(texts), length, texts[0][:1])
    if fmt is None:
        return None
    fitted = [text + FILLER * (length - len(text)) if not _near(text, length)
              else fit_line(text, fmt, i) for i, text in enumerate(texts)]
    indices = tuple(index for _, group in window for index in group)
    fixed = sum(abs(len(text) - length) for text in texts)
    return MrzCandidate(fmt, tuple(fitted), indices), fixed


def _plausibility(candidate: MrzCandidate) -> tuple[int, int]:
    """(check digits passing once corrected, minus the characters illegal where they are)."""
    fmt = candidate.format
    lines, _ = correct(fmt, list(candidate.lines))
    passing = sum(bool(result) for result in evaluate_checks(fmt, lines).values())
    return passing, -sum(_illegal(line, fmt, i) for i, line in enumerate(candidate.lines))


@functools.lru_cache(maxsize=256)
def fit_line(text: str, fmt: MrzFormat, index: int) -> str:
    """`text` at the format's line length (see the module docstring); unchanged if it is."""
    if len(text) == fmt.line_length:
        return text
    readings = dict.fromkeys(_edits(text, fmt.line_length - len(text)))  # ordered, no repeats
    return max(readings, key=lambda reading: _line_score(reading, fmt, index))


def _edits(text: str, missing: int) -> Iterator[str]:
    """Every reading `abs(missing)` filler insertions (or removals) away, preferred first."""
    if missing == 0:
        yield text
        return
    step = 1 if missing > 0 else -1
    for edited in _single_edits(text, grow=missing > 0):
        yield from _edits(edited, missing - step)


def _single_edits(text: str, *, grow: bool) -> list[str]:
    """Padding runs (3 or more fillers) first, then the end(s), then separators (1 or 2)."""
    runs = sorted(_filler_runs(text), key=lambda run: run[1] - run[0], reverse=True)
    padding = [start for start, end in runs if end - start >= PADDING_RUN]
    separators = [start for start, end in runs if end - start < PADDING_RUN]
    if grow:
        # A filler at the start only stands in for a lost first character: it realigns
        # the fields, and the check over that character still fails.
        inserted = [text[:at] + FILLER + text[at:] for at in padding]
        return [*inserted, text + FILLER,
                *(text[:at] + FILLER + text[at:] for at in separators), FILLER + text]
    removed = [text[:at] + text[at + 1:] for at in padding]
    return [*removed, text[1:], text[:-1], *(text[:at] + text[at + 1:] for at in separators)]


def _filler_runs(text: str) -> list[tuple[int, int]]:
    runs, start = [], None
    for i, char in enumerate(text + "."):
        if char == FILLER and start is None:
            start = i
        elif char != FILLER and start is not None:
            runs.append((start, i))
            start = None
    return runs


def _line_score(reading: str, fmt: MrzFormat, index: int) -> tuple[int, int]:
    """(check digits of this line that pass once corrected, minus the illegal characters)."""
    lines = [FILLER * fmt.line_length] * fmt.line_count
    lines[index] = reading
    corrected, _ = correct(fmt, lines)
    checks = [check for check in resolved_checks(fmt, corrected)
              if check.digit[0] == index and all(span[0] == index for span in check.spans)]
    passing = sum(check_passes(check, corrected) for check in checks)
    return passing, -_illegal(reading, fmt, index)


def _illegal(line: str, fmt: MrzFormat, index: int) -> int:
    """How many characters of line `index` cannot stand where they are."""
    legal = legal_characters(fmt)[index]
    return sum(char not in allowed for char, allowed in zip(line, legal, strict=True))


@functools.cache
def legal_characters(fmt: MrzFormat) -> tuple[tuple[frozenset[str], ...], ...]:
    """What each position may hold, a little stricter than its kind: a document code starts
    with the format's letters, a state code or a name with a letter, and a check digit is a
    filler only where Doc 9303 allows it."""
    grid = [[LEGAL[kind] for kind in row] for row in fmt.kinds]
    for field in fmt.fields:
        if field.name in LETTER_FIRST:
            grid[field.line][field.start] = frozenset(LETTERS)
    code = fmt.field("document_code")
    grid[code.line][code.start] = frozenset(fmt.document_codes)
    for check in fmt.checks:
        filler_allowed = check.name == "optional_data" or (
            check.name == "document_number" and fmt.number_overflow)
        if not filler_allowed:
            grid[check.digit[0]][check.digit[1]] = frozenset(DIGITS)
    return tuple(tuple(row) for row in grid)
