"""The visual zone against the MRZ: which MRZ fields the printed page must show, and
how a reading is compared with them. ``kyc_decision`` judges by this rule
(kyc.decision.policy.visual_zone_consistent), and ``ocr_postprocess`` reading for the
decision stops reading lines by it (kyc.document.ocr): one rule, one place.

The rule: the text read outside the MRZ must show the MRZ's surname and its document
number, each somewhere in it, compared as letters and digits only, case aside, with O
and 0, I and 1 taken alike (the recogniser's confusions). An MRZ without a surname or
a document number cannot agree; a page with no text outside the MRZ is *unread*, and
is not approved either (``visual_zone_unreadable``): a forger who prints an MRZ
recomputed for a made-up person on a page without its printed fields gains nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

# The MRZ fields the visual zone must show, as the MRZ gives them.
VISUAL_FIELDS = ("surname", "document_number")


def squash(text: str) -> str:
    """Upper case, letters and digits only, O read as 0 and I as 1 (OCR confusions)."""
    return re.sub(r"[^A-Z0-9]", "", text.upper()).replace("O", "0").replace("I", "1")


def wanted_values(document: Mapping[str, Any]) -> list[str]:
    """The squashed values of :data:`VISUAL_FIELDS` that the MRZ gave."""
    fields = document.get("fields") or {}
    return [squash(v) for v in (fields.get(name) for name in VISUAL_FIELDS) if v]


class VisualZone(Enum):
    """The visual zone against the MRZ (REPORT ``document.visual_zone``)."""

    AGREES = "agrees"  # shows the MRZ's surname and document number
    DIFFERS = "differs"  # text was read, and it does not show them (or the MRZ has none)
    UNREAD = "unread"  # no text was read outside the MRZ
    NO_MRZ = "no_mrz"  # nothing to compare with: no MRZ was read


def compare(document: Mapping[str, Any], visual_lines: Sequence[str]) -> VisualZone:
    """The visual zone ``visual_lines`` against ``document``'s MRZ (module docstring)."""
    if not document.get("mrz"):
        return VisualZone.NO_MRZ
    text = squash(" ".join(visual_lines))
    if not text:
        return VisualZone.UNREAD
    fields = document.get("fields") or {}
    wanted = [squash(fields.get(name) or "") for name in VISUAL_FIELDS]
    return (VisualZone.AGREES if all(wanted) and all(v in text for v in wanted)
            else VisualZone.DIFFERS)
