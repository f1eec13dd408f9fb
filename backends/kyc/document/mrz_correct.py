"""Undo OCR confusions in MRZ lines by field type, without ever hiding an altered character.

The rules, in order:

1. A character that is legal where it stands is never changed: a digit in a
   numeric field (dates, check digits), a letter in an alphabetic field (codes,
   names), anything in an alphanumeric field (document number, optional data).
   So a digit altered on the document is read, checked and reported as it is.
2. A character that cannot stand where it is becomes its look-alike: a letter in a
   numeric field becomes a digit (O, Q, D, U -> 0; I, L, J -> 1; Z -> 2; B -> 8;
   S -> 5; G -> 6; A -> 4; T -> 7), a digit in an alphabetic field becomes a
   letter (0 -> O, 1 -> I, 2 -> Z, 4 -> A, 5 -> S, 6 -> G, 7 -> T, 8 -> B).
3. A few letters look like two digits (B: 8 or 3, Z: 2 or 7, T: 7 or 1). Where
   the first choice leaves a date's check digit failing, the other choices of
   those positions only are tried (at most 2**6 readings) and the first that
   passes is kept. Check digits themselves only ever get their first choice:
   a check digit is never chosen to make its own check pass.
4. Alphanumeric fields get no look-alike mapping at all: there O and 0 are both
   legal, and letting the check digit choose between them could turn an altered
   document number into one that passes (the composite check would not catch
   it, as it weighs the document number exactly as its own check does). An OCR
   confusion there shows as a failing check, never as a silent repair.
5. Fillers misread in the padding: in a name, after a run of three or more
   fillers (which only padding can have), an isolated character is a misread
   filler; in a state code, an isolated character after a filler; in
   alphanumeric fields only an isolated 'K' (the usual misreading of '<') after two
   fillers, which is neutral to every check digit (K = 20 = 0 mod 10).

Only the characters are changed, never the length; see mrz_find for that.
"""

from __future__ import annotations

import itertools

from kyc.document.mrz_formats import (
    FILLER,
    Check,
    Kind,
    MrzFormat,
    check_passes,
    resolved_checks,
)

# First choice first. Only applied to letters found in numeric fields.
LETTER_TO_DIGITS: dict[str, str] = {
    "O": "0", "Q": "0", "D": "0", "U": "0",
    "I": "1", "L": "1", "J": "1",
    "Z": "27", "B": "83", "S": "5", "G": "6", "A": "4", "T": "71",
}
# Only applied to digits found in alphabetic fields.
DIGIT_TO_LETTER: dict[str, str] = {
    "0": "O", "1": "I", "2": "Z", "4": "A", "5": "S", "6": "G", "7": "T", "8": "B",
}
MAX_AMBIGUOUS = 6
PADDING_LOOKALIKE = "K"
STATE_CODES = ("issuing_state", "nationality")

Position = tuple[int, int]


def correct(fmt: MrzFormat, lines: list[str]) -> tuple[list[str], int]:
    """The corrected lines and how many characters were changed."""
    grid = [list(line) for line in lines]
    ambiguous = _map_lookalikes(fmt, grid)
    _clear_padding(fmt, grid)
    _choose_ambiguous(fmt, grid, ambiguous)
    fixed = ["".join(row) for row in grid]
    changed = sum(a != b for a, b in zip("".join(lines), "".join(fixed), strict=True))
    return fixed, changed


def _map_lookalikes(fmt: MrzFormat, grid: list[list[str]]) -> dict[Position, str]:
    """Rule 2 in place; returns the numeric positions that have more than one choice."""
    ambiguous: dict[Position, str] = {}
    for line, row in enumerate(grid):
        for position, char in enumerate(row):
            kind = fmt.kinds[line][position]
            if kind in (Kind.NUMERIC, Kind.CHECK) and char in LETTER_TO_DIGITS:
                choices = LETTER_TO_DIGITS[char]
                row[position] = choices[0]
                if kind is Kind.NUMERIC and len(choices) > 1:
                    ambiguous[(line, position)] = choices
            elif kind in (Kind.ALPHA, Kind.SEX) and char in DIGIT_TO_LETTER:
                row[position] = DIGIT_TO_LETTER[char]
    return ambiguous


def _clear_padding(fmt: MrzFormat, grid: list[list[str]]) -> None:
    """Rule 5 in place."""
    for field in fmt.fields:
        row = grid[field.line]
        text = "".join(row[field.start:field.end])
        if field.name == "name":
            cleared = clear_padding(text, min_run=3)
        elif field.name in STATE_CODES:
            cleared = clear_padding(text, min_run=1)
        elif field.kind is Kind.ALNUM:
            cleared = clear_padding(text, min_run=2, only=PADDING_LOOKALIKE)
        elif field.kind is Kind.SEX:
            cleared = FILLER if text == PADDING_LOOKALIKE else text
        else:
            continue
        row[field.start:field.end] = list(cleared)


def clear_padding(text: str, *, min_run: int, only: str | None = None) -> str:
    """Fillers for the isolated characters that follow the first run of `min_run` fillers.

    Isolated: a single character between fillers (or the end). Restricted to the
    characters of `only` when given. A run at the very start does not count:
    nothing in Doc 9303 starts a field with padding.
    """
    start = text.find(FILLER * min_run, 1)
    if start < 0:
        return text
    chars = list(text)
    for i in range(start + min_run, len(chars)):
        char = chars[i]
        if char == FILLER or (only is not None and char not in only):
            continue
        before_ok = chars[i - 1] == FILLER
        after_ok = i + 1 == len(chars) or chars[i + 1] == FILLER
        if before_ok and after_ok:
            chars[i] = FILLER
    return "".join(chars)


def _choose_ambiguous(fmt: MrzFormat, grid: list[list[str]],
                      ambiguous: dict[Position, str]) -> None:
    """Rule 3 in place: let each date check pick among the choices of its ambiguous letters."""
    if not ambiguous:
        return
    lines = ["".join(row) for row in grid]
    for check in resolved_checks(fmt, lines):
        if check.name == "composite":
            continue
        positions = [pos for pos in ambiguous if check.covers(*pos) and pos != check.digit]
        if positions and not check_passes(check, lines):
            _search(check, grid, positions[:MAX_AMBIGUOUS], ambiguous)
            lines = ["".join(row) for row in grid]


def _search(check: Check, grid: list[list[str]], positions: list[Position],
            ambiguous: dict[Position, str]) -> None:
    """The reading with the fewest second choices that passes; the first choices if none."""
    options = [range(len(ambiguous[pos])) for pos in positions]
    combos = sorted(itertools.product(*options), key=lambda combo: sum(map(bool, combo)))
    for combo in combos[1:]:
        for pos, choice in zip(positions, combo, strict=True):
            grid[pos[0]][pos[1]] = ambiguous[pos][choice]
        if check_passes(check, ["".join(row) for row in grid]):
            return
    for pos in positions:
        grid[pos[0]][pos[1]] = ambiguous[pos][0]
