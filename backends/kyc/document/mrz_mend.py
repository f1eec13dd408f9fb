"""Check digits that fail, mended from the recogniser's own second choices.

A phone photo's blur makes the recogniser hesitate between look-alikes (O and 0, D and
0, I and 1, B and 8): the check digits catch the wrong choice, and the document is
reported invalid though the printed line is a choice or two away. Here the characters a
failing check covers are given the other choices the recogniser offered for them
(:func:`kyc.document.ctc_length.character_options`) where the position may legally hold
them, and the likeliest reading with at most :data:`MAX_MENDS` changes that makes every
check pass (and its dates real) is taken.

What keeps an altered document invalid:
- a character is only ever exchanged for another character, never for a filler or a
  filler for one (measured: an altered personal number "mended" by writing a digit
  into its padding, issue 37);
- only a choice the recogniser offered with at least :data:`MIN_OPTION` probability, at
  a character it was not sure of (at most :data:`MAX_SURE` for what it wrote), is ever
  tried: a digit printed clearly, altered or not, is never changed;
- at most :data:`MAX_MENDS` characters, and only where the failing checks cover no more
  unsure characters than that: every unsure character is then chosen by the checks,
  none is left as first read beside a mend that may pass by chance (a check digit
  passes 1 reading in 10);
- no reading is taken if two differ in what they would change the MRZ to at the same
  cost (ambiguity).
A failing check with no such choices stays failing.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence

from kyc.document.ctc_length import LazyOptions, Options
from kyc.document.mrz_find import legal_characters
from kyc.document.mrz_formats import FILLER, MrzFormat, evaluate_checks, resolved_checks

MAX_MENDS = 2
MENDABLE_FIELDS = ("birth_date", "expiry_date", "document_number")
MIN_OPTION = 0.05
MAX_SURE = 0.95

Change = tuple[int, int, str, float]  # line, position, character, cost (-log p ratio)


def mend(fmt: MrzFormat, lines: list[str], options: Sequence[Options | LazyOptions | None],
         is_real: Callable[[list[str]], bool] = lambda lines: True) -> tuple[list[str], int]:
    """``lines`` with their failing checks mended (see the module docstring), and how many
    characters were changed (0: nothing could be, or nothing needed)."""
    checks = evaluate_checks(fmt, lines)
    failing = [name for name, ok in checks.items() if ok is False]
    if not failing:
        return lines, 0
    changes = _changes(fmt, lines, options, failing)
    best: list[tuple[float, list[str]]] = []
    for count in range(1, MAX_MENDS + 1):
        for combo in itertools.combinations(changes, count):
            if len({(line, pos) for line, pos, _, _ in combo}) < count:
                continue
            trial = _applied(lines, combo)
            if all(ok is not False for ok in evaluate_checks(fmt, trial).values()) \
                    and is_real(trial):
                best.append((sum(cost for *_, cost in combo), trial))
        if best:
            break
    if not best:
        return lines, 0
    best.sort(key=lambda found: found[0])
    if len(best) > 1 and math.isclose(best[0][0], best[1][0]) and best[0][1] != best[1][1]:
        return lines, 0  # two readings equally likely: no choice to make
    mended = best[0][1]
    return mended, sum(a != b for a, b in zip("".join(lines), "".join(mended), strict=True))


def _changes(fmt: MrzFormat, lines: list[str],
             options: Sequence[Options | LazyOptions | None],
             failing: list[str]) -> list[Change]:
    """The other choices offered at the positions the failing checks cover."""
    checks = [c for c in resolved_checks(fmt, lines) if c.name in failing]
    legal = legal_characters(fmt)
    mendable = _mendable(fmt)
    changes: list[Change] = []
    unsure = 0
    for line, given in enumerate(options):
        row = given() if callable(given) else given
        if row is None or len(row) != len(lines[line]):
            continue
        for pos, offered in enumerate(row):
            if (line, pos) not in mendable or not any(c.covers(line, pos) for c in checks):
                continue
            (_, sure), *others = offered
            if not is_unsure(lines[line][pos], sure):
                continue
            unsure += 1
            for char, prob in offered_instead(lines[line][pos], others, legal[line][pos]):
                changes.append((line, pos, char, math.log(sure / prob)))
    # More unsure characters than a mend may change: whichever passes leaves some unsure
    # ones as first read, and a reading that passes by chance (1 in 10 for one check)
    # would be taken for a mended one.
    return changes if unsure <= MAX_MENDS else []


def is_unsure(written: str, sure: float) -> bool:
    """Whether a character written with probability ``sure`` is one the recogniser was
    unsure of: a character (never a filler) at most MAX_SURE."""
    return written != FILLER and sure <= MAX_SURE


def offered_instead(written: str, others: Sequence[tuple[str, float]],
                    legal: frozenset[str]) -> list[tuple[str, float]]:
    """The choices offered beside ``written`` that may take its place: at least
    MIN_OPTION, legal where it stands, never a filler (nor ``written`` itself)."""
    return [(char, prob) for char, prob in others
            if prob >= MIN_OPTION and char in legal and char not in (written, FILLER)]


@functools.cache
def _mendable(fmt: MrzFormat) -> frozenset[tuple[int, int]]:
    """The positions a mend may change: the digits of the dates, which two checks weigh
    differently (their own and the composite), and the document number, which the
    caller confirms against the visual zone. Never a check digit (chosen to pass, it
    proves nothing), never the optional data (the composite weighs it as its own check
    does: a second check that adds nothing)."""
    return frozenset((field.line, pos) for field in fmt.fields
                     if field.name in MENDABLE_FIELDS
                     for pos in range(field.start, field.end))


def _applied(lines: list[str], combo: Sequence[Change]) -> list[str]:
    grid = [list(line) for line in lines]
    for line, pos, char, _ in combo:
        grid[line][pos] = char
    return ["".join(row) for row in grid]
