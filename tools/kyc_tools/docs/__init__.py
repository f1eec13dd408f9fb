"""Pages of docs/ generated from the vocabularies the code declares once (``kyc docs``).

Each page is a pure function of a declaration in the serving package: the reason codes
(:mod:`kyc.reasons` -> docs/reason-codes.md) and the liveness moves
(:mod:`kyc.liveness.challenge` -> docs/liveness-moves.md). ``kyc docs NAME`` writes a
page, ``kyc docs NAME --check`` (and a unit test) says when the committed one differs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Page:
    name: str  # `kyc docs NAME`
    path: Path  # relative to the project root
    render: Callable[[], str]

    @property
    def command(self) -> str:
        return f"kyc docs {self.name}"


def pages() -> dict[str, Page]:
    from kyc_tools.docs.moves import moves_page
    from kyc_tools.docs.reasons import reason_codes_page

    return {page.name: page for page in (
        Page("reasons", Path("docs/reason-codes.md"), reason_codes_page),
        Page("moves", Path("docs/liveness-moves.md"), moves_page),
    )}


def header(page: str, source: str) -> str:
    """The note at the top of a generated page."""
    return (f"<!-- Generated from {source} by `kyc docs {page}`: edit the declaration, then "
            f"run the command; a unit test fails when this page differs. -->\n")


def table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """A Markdown table (cells must not hold a ``|``)."""
    for row in rows:
        if any("|" in cell for cell in row):
            raise ValueError(f"a table cell holds '|': {row}")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
