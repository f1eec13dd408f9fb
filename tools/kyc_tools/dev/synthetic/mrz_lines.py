"""MRZ line crops as the document reader gives them to ``mrz_rec``, with their text.

Each page is a document of :func:`kyc_tools.dev.synthetic.document.random_identity` (the
whole range Doc 9303 allows: look-alike letters in numbers, short and cut names),
TD1, TD2 or TD3, photographed (default or :data:`HARSH` degradations). Each MRZ line
is cut out as the reader cuts a detector's box (:func:`kyc.document.lines.crop_line`),
from where the renderer printed it, its edges moved as the detector's boxes move:
measured on 12 pages (4 of each kind) through ``document_ocr`` (issue 45), the box starts
0.03-0.23 of a character cell inside the line's first cell, ends up to 0.32 of a cell
short of its last, and runs 0.04-0.24 of the capital height above the capitals and
0.01-0.12 below the baseline. The draws below take a wider range than measured. The
crop is then scaled to the recogniser's height and squeezed as the reader does
(:func:`kyc.document.lines.resize_for_rec`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date

import cv2
import numpy as np

from kyc.document.lines import crop_line, resize_for_rec

from .document import HARSH, LAYOUTS, Degradation, random_identity, render_document

KINDS = ("td1", "td2", "td3")
# Edges of a crop, drawn uniformly (fractions of a cell across, of the capital height up
# and down): a positive figure moves the edge into the text.
LEFT_IN = (-0.35, 0.35)
RIGHT_IN = (-0.35, 0.45)
TOP_OUT = (-0.05, 0.40)
BOTTOM_OUT = (-0.05, 0.30)
CORNER_NOISE = 0.08  # each corner moved by up to this much of the capital height


@dataclass(frozen=True)
class LineSample:
    image: np.ndarray  # [48, W, 3] uint8, as the reader hands it to the recogniser
    text: str
    kind: str


def line_samples(rng: np.random.Generator, pages: int, *, squeeze: float, max_width: int,
                 crops_per_line: int = 1, harsh_share: float = 0.5,
                 today: date | None = None) -> Iterator[LineSample]:
    """``crops_per_line`` crops of every MRZ line of ``pages`` rendered pages."""
    for k in range(pages):
        kind = KINDS[k % len(KINDS)]
        degrade = HARSH if rng.random() < harsh_share else Degradation()
        page = render_document(random_identity(rng, today), kind, None, degrade, rng,
                               today=today)
        for number, text in enumerate(page.mrz_lines):
            for _ in range(crops_per_line):
                box = _jittered_box(kind, number, len(text), page.corners, rng)
                crop = crop_line(page.image, box)
                yield LineSample(resize_for_rec(crop, max_width, squeeze), text, kind)


def _jittered_box(kind: str, number: int, length: int, corners: np.ndarray,
                  rng: np.random.Generator) -> np.ndarray:
    """The photo's quadrilateral (TL, TR, BR, BL) of MRZ line ``number``, its edges moved
    as a detector's box's are (the module's ranges)."""
    layout = LAYOUTS[kind]
    pitch, cap = layout.mrz_pitch, layout.mrz_cap
    baseline = layout.mrz_baselines[number]
    left = layout.mrz_left + rng.uniform(*LEFT_IN) * pitch
    right = layout.mrz_left + length * pitch - rng.uniform(*RIGHT_IN) * pitch
    top = baseline - cap - rng.uniform(*TOP_OUT) * cap
    bottom = baseline + rng.uniform(*BOTTOM_OUT) * cap
    box = np.array([[left, top], [right, top], [right, bottom], [left, bottom]], np.float64)
    box += rng.uniform(-1, 1, box.shape) * CORNER_NOISE * cap
    width, height = layout.size
    page = np.array([[0, 0], [width, 0], [width, height], [0, height]], np.float32)
    matrix = cv2.getPerspectiveTransform(page, corners.astype(np.float32))
    return cv2.perspectiveTransform(box[None].astype(np.float32), matrix)[0]
