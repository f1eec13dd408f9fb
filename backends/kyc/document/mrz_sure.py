"""Where the reader was unsure: the failing checks a misread explains, and the name letters
that may be fillers (issue 45).

A check digit that fails on a phone photo is most often the recogniser's wrong choice
between look-alikes (O and 0, I and 1, B and 8, D and 0) in an alphanumeric document
number, which :mod:`kyc.document.mrz_mend` may not choose for it. Such a page stays not
valid, but nothing shows it altered either: :func:`misread_checks` names the failing
checks that a doubtful character explains, so that ``kyc_decision`` asks for another
photo (``mrz_misread``) instead of rejecting. Doubtful is what a mend would try: written
unsure, with another character offered that is legal where it stands (not a filler).
Written unsure alone is not enough: the recogniser writes most zeros at 0.8 to 0.95
with an O beside them, which cannot stand in a date or a check digit. Of 300 harshly
photographed pages with one digit altered, 47 would have been taken for misreads with
"written unsure" alone, 11 with a legal choice offered (docs/mrz-reading.md).

A name has no check digit: fillers the recogniser half saw as letters
(``ANDRES<<<<<<`` read ``ANDRES<CCCCC``) pass every check. :func:`name_unsure` says when a
letter of the name was read unsure where the recogniser offered a filler; the page is
then not valid (problem ``name_unsure``).

Only the recogniser's own probabilities are read (:mod:`kyc.document.ctc_length`'s options,
the written character first), with mrz_mend's bounds: unsure is at most
:data:`~kyc.document.mrz_mend.MAX_SURE` for the character written, offered is at least
:data:`~kyc.document.mrz_mend.MIN_OPTION`. Nothing here changes a character, and nothing
makes a page more valid: a line without options (not known, or not the line as read) is
taken as read with confidence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kyc.document.ctc_length import LazyOptions, Options
from kyc.document.mrz_find import legal_characters
from kyc.document.mrz_formats import CHECK_NAMES, FILLER, MrzFormat, resolved_checks
from kyc.document.mrz_mend import MIN_OPTION, is_unsure, offered_instead

# In DOCUMENT's mrz.misread beside the check names: a name letter read unsure where a
# filler was offered; and the problem that makes such an MRZ not valid.
NAME = "name"
NAME_UNSURE = "name_unsure"

Given = Sequence[Options | LazyOptions | None]


def check_failed(name: str) -> str:
    """The problem (DOCUMENT's ``mrz.problems``) of the check ``name`` failing."""
    return f"{name}_check_failed"


def misread_checks(fmt: MrzFormat, lines: list[str], options: Given,
                   checks: Mapping[str, bool | None]) -> list[str]:
    """The failing checks of ``checks`` (in :data:`CHECK_NAMES` order) that a misread may
    explain: they cover a doubtful character (:func:`_doubtful`) that no passing check
    covers. A character a passing check also covers is not taken: misread, it would have
    had to keep that check passing (1 reading in 10)."""
    resolved = resolved_checks(fmt, lines)
    failing = [c for c in resolved if checks.get(c.name) is False]
    if not failing:
        return []
    passing = [c for c in resolved if checks.get(c.name) is True]
    legal = legal_characters(fmt)
    wanted = {span[0] for c in failing for span in c.spans} | {c.digit[0] for c in failing}
    doubtful = [(line, pos) for line in sorted(wanted)
                for pos in _doubtful(lines[line], _row(options, lines, line), legal[line])
                if not any(c.covers(line, pos) for c in passing)]
    explained = {c.name for c in failing if any(c.covers(line, pos) for line, pos in doubtful)}
    return [name for name in CHECK_NAMES if name in explained]


def name_unsure(fmt: MrzFormat, lines: list[str], options: Given) -> bool:
    """Whether a letter of the name was written with at most MAX_SURE where the recogniser
    offered a filler with at least MIN_OPTION."""
    field = fmt.field("name")
    row = _row(options, lines, field.line)
    if row is None:
        return False
    for pos in range(field.start, field.end):
        (_, sure), *others = row[pos]
        if is_unsure(lines[field.line][pos], sure) and any(
                char == FILLER and prob >= MIN_OPTION for char, prob in others):
            return True
    return False


def only_misread(mrz: Mapping[str, Any]) -> bool:
    """Whether an MRZ (DOCUMENT's ``mrz``) is not valid only where the reader was unsure:
    it names problems, and each is a failing check in ``misread`` or the name's
    (:data:`NAME_UNSURE`, with :data:`NAME` in ``misread``). Any other problem (a check
    that fails over no doubtful character, an impossible date, an unknown state code),
    or an MRZ without ``problems`` or ``misread``: False."""
    misread, problems = mrz.get("misread"), mrz.get("problems")
    if not isinstance(misread, list) or not isinstance(problems, list) or not problems:
        return False
    explained = {check_failed(name) for name in misread if name in CHECK_NAMES}
    if NAME in misread:
        explained.add(NAME_UNSURE)
    failing = {name for name, ok in (mrz.get("checks") or {}).items() if ok is False}
    return set(problems) <= explained and failing <= set(misread)


def _row(options: Given, lines: list[str], line: int) -> Options | None:
    """The options of ``line`` (worked out now if lazy), or None where not known or not
    of this line as it stands (another length)."""
    given = options[line] if line < len(options) else None
    row = given() if callable(given) else given
    return row if row is not None and len(row) == len(lines[line]) else None


def _doubtful(line: str, row: Options | None, legal: Sequence[frozenset[str]]) -> list[int]:
    """The positions of ``line`` holding a character (not a filler) written with at most
    MAX_SURE where the recogniser offered another, legal there and not a filler, with at
    least MIN_OPTION: the characters a mend would try (kyc.document.mrz_mend)."""
    if row is None:
        return []
    return [pos for pos, ((_, sure), *others) in enumerate(row)
            if is_unsure(line[pos], sure) and offered_instead(line[pos], others, legal[pos])]
