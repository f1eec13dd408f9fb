"""The visual zone against the MRZ: which MRZ fields the printed page must show, and
how a reading is compared with them. ``kyc_decision`` judges by this rule
(kyc.decision.policy.visual_zone_consistent), and ``ocr_postprocess`` reading for the
decision stops reading lines by it (kyc.document.ocr): one rule, one place.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
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


def shows_mrz_fields(document: Mapping[str, Any], visual_lines: Sequence[str]) -> bool | None:
    """Whether the visual zone shows the MRZ's surname and document number; None when
    there is nothing to compare (no MRZ fields, or no visual text)."""
    wanted = wanted_values(document)
    text = squash(" ".join(visual_lines))
    if not wanted or not text:
        return None
    return all(v in text for v in wanted)
