"""The codes an MRZ may give as issuing state or nationality (ICAO Doc 9303 Part 3, 5).

ISO 3166-1 alpha-3 (from the ``iso3166`` package), plus the codes Doc 9303 adds: one
letter for Germany, the British variants, the United Nations and other issuing
organisations, the stateless and refugee codes, and ``UTO`` and ``YTO``, the fictitious
states of Doc 9303's specimens and worked examples (``UTO``: the documents this project
renders). A code outside the list is
a misreading the check digits cannot see: no check digit covers a state code.
"""

from __future__ import annotations

from iso3166 import countries_by_alpha3

ICAO_ADDITIONS = frozenset({
    "D",  # Germany
    "GBD", "GBN", "GBO", "GBP", "GBS",  # British territories, nationals, subjects
    "UNO", "UNA", "UNK",  # United Nations, its agencies, its Kosovo mission
    "EUE",  # European Union
    "XBA", "XIM", "XCC", "XCE", "XCO", "XDC", "XEC", "XES", "XMP", "XOM", "XPO",  # orgs
    "XXA", "XXB", "XXC", "XXX",  # stateless, refugees, unspecified
    "RKS",  # Kosovo, as its documents print it
    "UTO", "YTO",  # Doc 9303's specimens and Part 3's worked examples (Appendix A)
})
STATE_CODES = frozenset(countries_by_alpha3) | ICAO_ADDITIONS


def known_state(code: str) -> bool:
    """Whether ``code`` (fillers stripped) names a state or organisation Doc 9303 lists."""
    return code in STATE_CODES
