"""Document reading after the detector: boxes -> crops -> batched recognition -> MRZ.

:class:`DocumentReader` is independent of Triton: the recogniser is a callable
taking a ``[N, 48, W, 3]`` uint8 batch and returning ``[N, W/8, C]`` class
probabilities (served: a BLS call to ``ocr_rec``). The crops of ALL documents of
one ``execute`` are recognised together, in as few calls as their widths allow.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from kyc.document.db import DBSettings, text_boxes
from kyc.document.lines import (
    REC_STRIDE,
    class_mask,
    crop_line,
    ctc_greedy,
    plan_batches,
    reading_order,
)
from kyc.document.mrz import parse_mrz

log = logging.getLogger(__name__)

Recogniser = Callable[[np.ndarray], np.ndarray]
MRZ_CHARACTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789<"


@dataclass(frozen=True)
class OcrSettings:
    """``ocr_postprocess`` parameters (config ``parameters``; defaults here only)."""

    rec_model: str = "ocr_rec"
    rec_max_batch: int = 8  # crops per ocr_rec call (at most its max_batch_size)
    rec_max_width: int = 1600  # widest crop given to the recogniser, pixels at height 48
    thresh: float = 0.3
    box_thresh: float = 0.6
    unclip_ratio: float = 1.5
    max_candidates: int = 1000
    min_size: float = 3.0
    min_confidence: float = 0.5  # recognised lines below are dropped
    # MRZ-shaped crops are read squeezed horizontally, and MRZ lines decoded
    # restricted to [A-Z0-9<]: at its natural width the recogniser merges runs of
    # '<' fillers (measured on rendered OCR-B: 8 of 24 lines exact at 1.0, 16 at 0.6).
    mrz_min_aspect: float = 18.0  # width / height of a crop that may be an MRZ line
    mrz_squeeze: float = 0.6

    @property
    def db(self) -> DBSettings:
        return DBSettings(self.thresh, self.box_thresh, self.unclip_ratio,
                          self.max_candidates, self.min_size)


@dataclass
class TextLine:
    text: str
    confidence: float
    box: np.ndarray  # [4, 2] in input pixels
    mrz: bool = False  # read as an MRZ line: restricted to [A-Z0-9<]

    def to_json(self) -> dict:
        return {"text": self.text, "confidence": round(self.confidence, 4),
                "box": [[round(float(x), 1), round(float(y), 1)] for x, y in self.box],
                "mrz": self.mrz}


def may_be_mrz(text: str, crop: np.ndarray, min_aspect: float) -> bool:
    """A long, thin crop whose free reading is mostly [A-Z0-9<] (any case: the free
    reading confuses case and 'O'/'0'; spaces count against it)."""
    height, width = crop.shape[:2]
    if width < min_aspect * height or len(text) < 8:
        return False
    return sum(c in MRZ_CHARACTERS for c in text.upper()) >= 0.85 * len(text)


class DocumentReader:
    def __init__(self, settings: OcrSettings, alphabet: Sequence[str], recognise: Recogniser):
        self.settings = settings
        self.alphabet = list(alphabet)
        self.recognise = recognise
        self.mrz_mask = class_mask(self.alphabet, MRZ_CHARACTERS)

    def read(self, pages: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]
             ) -> list[list[TextLine]]:
        """Text lines in reading order for each (canvas, probability map, scale) page.

        ``scale`` is canvas pixels per input pixel (x, y): boxes are reported in input
        pixels.
        """
        started = time.perf_counter()
        crops, owners, boxes = [], [], []
        for page, (canvas, prob, _) in enumerate(pages):
            found = text_boxes(prob, self.settings.db)
            for i in reading_order([b.points for b in found]):
                crops.append(crop_line(canvas, found[i].points))
                owners.append(page)
                boxes.append(found[i].points)
        readings, mrz = self._read_crops(crops)
        lines: list[list[TextLine]] = [[] for _ in pages]
        for i, ((text, confidence), page, box) in enumerate(
                zip(readings, owners, boxes, strict=True)):
            if text.strip() and confidence >= self.settings.min_confidence:
                lines[page].append(TextLine(text, confidence, box / pages[page][2], i in mrz))
        log.debug("ocr: %d pages, %d crops, %d MRZ lines in %.1f ms", len(pages),
                  len(crops), len(mrz), (time.perf_counter() - started) * 1e3)
        return lines

    def _read_crops(self, crops: list[np.ndarray]) -> tuple[list[tuple[str, float]], set[int]]:
        """(text, confidence) of every crop, and which crops were read as MRZ lines.

        Each crop is recognised once: long crops (MRZ-shaped) squeezed, the others at
        their natural width. A long crop whose free reading looks like an MRZ line is
        decoded again from the same probabilities, restricted to [A-Z0-9<]; any other
        long crop (a long visual-zone line) is recognised again at its natural width.
        """
        settings = self.settings
        long = {i for i, crop in enumerate(crops)
                if crop.shape[1] >= settings.mrz_min_aspect * crop.shape[0]}
        steps = self._recognise(crops, [settings.mrz_squeeze if i in long else 1.0
                                        for i in range(len(crops))])
        readings = [ctc_greedy(s, self.alphabet) for s in steps]
        mrz = {i for i in long if may_be_mrz(readings[i][0], crops[i], settings.mrz_min_aspect)}
        for i in mrz:
            readings[i] = ctc_greedy(steps[i], self.alphabet, self.mrz_mask)
        others = sorted(long - mrz)
        if others:
            again = self._recognise([crops[i] for i in others], [1.0] * len(others))
            for i, s in zip(others, again, strict=True):
                readings[i] = ctc_greedy(s, self.alphabet)
        return readings, mrz

    def _recognise(self, crops: list[np.ndarray], squeeze: list[float]) -> list[np.ndarray]:
        """The recogniser's ``[T, C]`` probabilities of each crop (padding cut off)."""
        results: list = [None] * len(crops)
        for batch in plan_batches(crops, self.settings.rec_max_batch,
                                  max_width=self.settings.rec_max_width, squeeze=squeeze):
            probs = self.recognise(batch.images)
            for row, (index, width) in enumerate(zip(batch.indices, batch.widths, strict=True)):
                results[index] = probs[row, : -(-width // REC_STRIDE)]
        return results


def document_report(lines: Sequence[TextLine]) -> dict:
    """The contract's DOCUMENT: the MRZ found among the lines read as MRZ lines, its
    checks and fields."""
    return parse_mrz([line.text for line in lines if line.mrz])

