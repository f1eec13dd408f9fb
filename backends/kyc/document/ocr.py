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
from dataclasses import dataclass, field

import numpy as np

from kyc.document.ctc_length import LazyOptions, ctc_fixed_length, lazy_options
from kyc.document.db import DBSettings, text_boxes
from kyc.document.lines import (
    REC_STRIDE,
    band_line,
    class_mask,
    crop_line,
    ctc_greedy,
    plan_batches,
    reading_rows,
)
from kyc.document.mrz import parse_mrz
from kyc.document.mrz_formats import FORMATS
from kyc.document.mrz_rec import MRZ_ALPHABET
from kyc.document.visual import squash, wanted_values

log = logging.getLogger(__name__)

Recogniser = Callable[[np.ndarray], np.ndarray]
MRZ_CHARACTERS = MRZ_ALPHABET
# A mended MRZ line (DocumentReader._mend_mrz) reads within this many characters of
# the whole line beside it (the MRZ reader fixes lengths within 3, kyc.document.mrz_find).
MRZ_LENGTH_SLACK = 3
LINE_MODES = ("all", "decision")
# An MRZ line read short is read again at its known length when it is at most this many
# characters short (measured on harsh pages: 4 to 11 fillers lost, issue 37) and its crop
# at least this share of the page's widest MRZ crop.
MAX_FILLERS_LOST = 12
WHOLE_LINE_WIDTH = 0.85
MRZ_LINE_LENGTHS = tuple(sorted({fmt.line_length for fmt in FORMATS.values()}))
# The mean character probability above which an MRZ recogniser's reading of the right
# length with fillers in it is taken as an MRZ line without the general recogniser.
SURE_MRZ_CONFIDENCE = 0.9


def line_length_for(longest: int) -> int | None:
    """The MRZ line length of a page whose longest MRZ line reads ``longest`` characters:
    the shortest format line at least that long (None: longer than any)."""
    return next((n for n in MRZ_LINE_LENGTHS if n >= longest), None)
# Width of one printed capital over the height of its detected box (the text height
# unclipped by DB): what orders the visual-zone lines when reading for the decision.
# Measured on the held-in documents (kyc bench's): 0.63-0.80 for the upper-case field
# values, 0.34-0.62 for the mixed-case captions.
CHAR_ASPECT = 0.65


@dataclass(frozen=True)
class OcrSettings:
    """``ocr_postprocess`` parameters (config ``parameters``; defaults here only)."""

    rec_model: str = "ocr_rec"
    # The recogniser of the lines found to be MRZ lines (kyc.document.mrz_rec's contract):
    # they are read again by it, squeezed as below. "": read from rec_model's answer,
    # restricted to [A-Z0-9<] (as before mrz_rec).
    mrz_model: str = ""
    rec_max_batch: int = 8  # crops per ocr_rec call (at most its max_batch_size)
    rec_max_width: int = 1600  # widest crop given to the recogniser, pixels at height 48
    # Each crop is padded to its width rounded up to this (kyc.document.lines.plan_batches:
    # a reading that depends on the crop alone, never on the crops sharing its call).
    rec_width_step: int = 64
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
    # Which lines are recognised: "all" (document_ocr: every line of the page), or
    # "decision" (kyc_ensemble: the MRZ, then the visual zone only until the lines read
    # show every value kyc_decision compares with the MRZ; kyc.document.visual).
    lines: str = "all"
    # Decision reading: visual-zone lines go to the recogniser this many per page and
    # round, those whose width fits a wanted value first.
    visual_round: int = 8
    # A model whose parameters are the defaults of this one's (ocr_fields reads
    # ocr_postprocess's: the DB and recogniser settings are defined once).
    settings_model: str = ""

    def __post_init__(self) -> None:
        if self.lines not in LINE_MODES:
            raise ValueError(f"lines must be one of {', '.join(LINE_MODES)}, not {self.lines!r}")
        if self.visual_round < 1:
            raise ValueError("visual_round must be at least 1")
        if self.rec_width_step < REC_STRIDE or self.rec_width_step % REC_STRIDE:
            raise ValueError(f"rec_width_step must be a multiple of {REC_STRIDE}")

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
    # An MRZ line's characters as the recogniser offered them (kept in the step, never
    # sent: the MRZ reader mends check-digit failures from them, kyc.document.mrz_mend).
    options: LazyOptions | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict:
        return {"text": self.text, "confidence": round(self.confidence, 4),
                "box": [[round(float(x), 1), round(float(y), 1)] for x, y in self.box],
                "mrz": self.mrz}


def surely_mrz(text: str, confidence: float) -> bool:
    """Whether an MRZ recogniser's reading of a long crop is surely an MRZ line: about the
    length of one (:data:`MRZ_LENGTH_SLACK`), two fillers in a row (every format's name
    field ends with them, and most number lines have some), read with
    :data:`SURE_MRZ_CONFIDENCE`. A line that is not is still an MRZ line when the general
    recogniser's reading looks like one (:func:`may_be_mrz`)."""
    return ("<<" in text and confidence >= SURE_MRZ_CONFIDENCE
            and min(abs(len(text) - n) for n in MRZ_LINE_LENGTHS) <= MRZ_LENGTH_SLACK)


def may_be_mrz(text: str, crop: np.ndarray, min_aspect: float) -> bool:
    """A long, thin crop whose free reading is mostly [A-Z0-9<] (any case: the free
    reading confuses case and 'O'/'0'; spaces count against it)."""
    height, width = crop.shape[:2]
    if width < min_aspect * height or len(text) < 8:
        return False
    return sum(c in MRZ_CHARACTERS for c in text.upper()) >= 0.85 * len(text)


Reading = tuple[str, float, bool]  # text, confidence, read as an MRZ line
Readings = dict[tuple[int, int], Reading]  # (page, line) -> reading


@dataclass
class _Page:
    """The text lines the detector found on one canvas: (crop, box in canvas pixels) in
    reading order, and the rows they make (indices into ``items``)."""

    canvas: np.ndarray
    items: list[tuple[np.ndarray, np.ndarray]]
    rows: list[list[int]]


class DocumentReader:
    def __init__(self, settings: OcrSettings, alphabet: Sequence[str], recognise: Recogniser,
                 read_mrz: Recogniser | None = None):
        self.settings = settings
        self.alphabet = list(alphabet)
        self.recognise = recognise
        self.mrz_mask = class_mask(self.alphabet, MRZ_CHARACTERS)
        # An MRZ line's probabilities: read_mrz's (classes: the blank, MRZ_ALPHABET), else
        # the recogniser's own, restricted to the MRZ characters.
        self.read_mrz = read_mrz
        self.mrz_alphabet = list(MRZ_ALPHABET) if read_mrz else self.alphabet
        self.mrz_classes = None if read_mrz else self.mrz_mask

    def read(self, pages: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]
             ) -> list[list[TextLine]]:
        """Text lines in reading order for each (canvas, probability map, scale) page.

        ``scale`` is canvas pixels per input pixel (x, y): boxes are reported in input
        pixels. With ``lines="decision"`` only the lines the decision needs are read
        (:meth:`_read_for_decision`).
        """
        started = time.perf_counter()
        found = [self._lines_found(canvas, prob) for canvas, prob, _ in pages]
        if self.settings.lines == "decision":
            readings, steps = self._read_for_decision(found)
        else:
            flat = [(page, i) for page, p in enumerate(found) for i in range(len(p.items))]
            texts, mrz = self._read_crops([found[page].items[i][0] for page, i in flat])
            readings = {key: (*texts[k], k in mrz) for k, key in enumerate(flat)}
            steps = {flat[k]: step for k, step in mrz.items()}
            self._mend_mrz(found, readings, steps)
            self._fit_mrz_lengths(found, readings, steps)
        lines: list[list[TextLine]] = [[] for _ in pages]
        for (page, i), (text, confidence, is_mrz) in sorted(readings.items()):
            if self._kept(text, confidence):
                options = (lazy_options(steps[page, i], self.mrz_alphabet, text,
                                        self.mrz_classes)
                           if is_mrz and (page, i) in steps else None)
                lines[page].append(TextLine(text, confidence,
                                            found[page].items[i][1] / pages[page][2], is_mrz,
                                            options))
        log.debug("ocr: %d pages, %d of %d crops read, %d MRZ lines in %.1f ms", len(pages),
                  len(readings), sum(len(p.items) for p in found),
                  sum(r[2] for r in readings.values()), (time.perf_counter() - started) * 1e3)
        return lines

    def _lines_found(self, canvas: np.ndarray, prob: np.ndarray) -> _Page:
        """The text lines the map shows on ``canvas``, in reading order."""
        boxes = text_boxes(prob, self.settings.db)
        rows = reading_rows([b.points for b in boxes])
        order = [i for row in rows for i in row]
        position = {box: k for k, box in enumerate(order)}
        return _Page(canvas, [(crop_line(canvas, boxes[i].points), boxes[i].points) for i in order],
                     [[position[i] for i in row] for row in rows])

    def _mend_mrz(self, found: list[_Page], readings: Readings,
                  steps: dict[tuple[int, int], np.ndarray]) -> set[tuple[int, int]]:
        """MRZ lines the detector cut in pieces or found only in part, read whole.

        A row that is not one whole MRZ line (an MRZ line found in one box), beside one
        (:func:`kyc.document.lines.band_line`), is read again along that line's span,
        squeezed; when that reading is an MRZ line of
        about the same length with fillers in it, it takes the place of the row's
        pieces (the first piece's line; the others are dropped from ``readings``, and
        ``steps``, the MRZ lines' probabilities, follows).
        Repeated once, for a line beside a mended one (TD1's three lines). A page whose
        MRZ lines were all found whole costs nothing. Returns the lines dropped.
        """
        def is_mrz(page: int, i: int) -> bool:
            return readings.get((page, i), ("", 0.0, False))[2]

        dropped: set[tuple[int, int]] = set()
        tried: set[tuple[int, int]] = set()  # (page, first line of the row)
        mended: list[tuple[int, np.ndarray]] = []  # (page, box) of each line read whole
        for _ in range(2):
            todo = []  # (page, row, box, the whole line's text)
            for page, found_page in enumerate(found):
                whole = [row[0] for row in found_page.rows
                         if len(row) == 1 and is_mrz(page, row[0])]
                for row in found_page.rows:
                    if row[0] in whole or (page, row[0]) in tried:
                        continue
                    for i in whole:
                        box = band_line(found_page.items[i][1],
                                        [found_page.items[k][1] for k in row])
                        if box is not None:
                            todo.append((page, row, box, readings[page, i][0]))
                            tried.add((page, row[0]))
                            break
            if not todo:
                break
            crops = [crop_line(found[page].canvas, box) for page, _, box, _ in todo]
            again = self._recognise(crops, [self.settings.mrz_squeeze] * len(crops),
                                    self.read_mrz)
            for (page, row, box, beside), crop, step in zip(todo, crops, again, strict=True):
                text, _ = ctc_greedy(step, self.mrz_alphabet)
                if not may_be_mrz(text, crop, self.settings.mrz_min_aspect):
                    continue
                text, confidence = ctc_greedy(step, self.mrz_alphabet, self.mrz_classes)
                if "<" not in text or abs(len(text) - len(beside)) > MRZ_LENGTH_SLACK:
                    continue
                if any(p == page and _same_line(box, b) for p, b in mended):
                    row = [None, *row]  # another piece of a line read whole: dropped
                else:
                    mended.append((page, box))
                    found[page].items[row[0]] = (crop, box)
                    readings[page, row[0]] = (text, confidence, True)
                    steps[page, row[0]] = step
                for i in row[1:]:
                    readings.pop((page, i), None)
                    steps.pop((page, i), None)
                    dropped.add((page, i))
        return dropped

    def _kept(self, text: str, confidence: float) -> bool:
        return bool(text.strip()) and confidence >= self.settings.min_confidence

    def _read_for_decision(self, found: list[_Page]
                           ) -> tuple[Readings, dict[tuple[int, int], np.ndarray]]:
        """Read what ``kyc_decision`` uses, (page, line) -> (text, confidence, MRZ), and
        the MRZ lines' probabilities.

        First the MRZ-shaped lines of every page, exactly as :meth:`_read_crops` reads
        them, and the MRZ lines mended beside them (:meth:`_mend_mrz`), as a full
        reading mends them; a page whose MRZ gives the values the visual zone must show
        (kyc.document.visual) then has its other lines read in rounds, those whose width
        fits a wanted value first, until every value is found within one kept line. The
        decision is the one a full reading gives: a value found in one line is found
        in the text of all lines, and a page whose values are not all found is read
        to its last line. A page without those values reads no visual line.
        """
        settings = self.settings
        long = [(page, i) for page, p in enumerate(found) for i, (crop, _) in enumerate(p.items)
                if crop.shape[1] >= settings.mrz_min_aspect * crop.shape[0]]
        crops = [found[p].items[i][0] for p, i in long]
        texts, found_mrz = self._read_long(crops, set())
        readings: Readings = {long[k]: (*texts[k], True) for k in found_mrz}
        mrz_steps = {long[k]: step for k, step in found_mrz.items()}
        dropped = self._mend_mrz(found, readings, mrz_steps)
        self._fit_mrz_lengths(found, readings, mrz_steps)
        pending: dict[int, list[int]] = {}
        wanted: dict[int, set[str]] = {}
        for page, p in enumerate(found):
            mrz_lines = [readings[page, i][0] for i in range(len(p.items))
                         if (page, i) in readings and self._kept(*readings[page, i][:2])]
            values = set(wanted_values(parse_mrz(mrz_lines)))
            if values:
                wanted[page] = values
                left = [i for i in range(len(p.items))
                        if (page, i) not in readings and (page, i) not in dropped]
                pending[page] = _by_fit(left, [c.shape for c, _ in p.items], values)
        while pending:
            batch = [(page, i) for page, left in pending.items()
                     for i in left[: settings.visual_round]]
            steps = self._recognise([found[p].items[i][0] for p, i in batch],
                                    [1.0] * len(batch))
            for (page, i), step in zip(batch, steps, strict=True):
                text, confidence = ctc_greedy(step, self.alphabet)
                readings[page, i] = (text, confidence, False)
                if self._kept(text, confidence):
                    wanted[page] -= {v for v in wanted[page] if v in squash(text)}
            for page in list(pending):
                pending[page] = pending[page][settings.visual_round:]
                if not pending[page] or not wanted[page]:
                    del pending[page]
        return readings, mrz_steps

    def _read_crops(self, crops: list[np.ndarray]
                    ) -> tuple[list[tuple[str, float]], dict[int, np.ndarray]]:
        """(text, confidence) of every crop, and the crops read as MRZ lines (with their
        probabilities).

        Each crop is recognised once: long crops (MRZ-shaped) squeezed, the others at
        their natural width. A long crop whose free reading looks like an MRZ line is
        decoded again from the same probabilities, restricted to [A-Z0-9<]; any other
        long crop (a long visual-zone line) is recognised again at its natural width.
        """
        long = {i for i, crop in enumerate(crops)
                if crop.shape[1] >= self.settings.mrz_min_aspect * crop.shape[0]}
        short = {i for i in range(len(crops)) if i not in long}
        texts, mrz = self._read_long(crops, short)
        others = sorted(long - set(mrz))
        if others:
            again = self._recognise([crops[i] for i in others], [1.0] * len(others))
            for i, s in zip(others, again, strict=True):
                texts[i] = ctc_greedy(s, self.alphabet)
        return [texts[i] for i in range(len(crops))], mrz

    def _read_long(self, crops: list[np.ndarray], short: set[int]
                   ) -> tuple[dict[int, tuple[str, float]], dict[int, np.ndarray]]:
        """The crops that are not in ``short`` (indices), read as MRZ lines or not, and
        the crops of ``short`` read by the recogniser alongside at their natural width:
        (text, confidence) by index (an MRZ line's as its MRZ reading, a long line that is not
        an MRZ line has none), and the MRZ lines' probabilities (:attr:`mrz_alphabet`).

        With ``read_mrz``, every long crop is read by it first: one it reads surely as an
        MRZ line (:func:`surely_mrz`) is one, and the general recogniser never sees it (it
        cost 23 times as much: 77 ms against 3.3 for 3 lines of 704 pixels, one
        onnxruntime thread). The others are read squeezed by the recogniser, with the
        ``short`` crops, and are MRZ lines when that free reading looks like one
        (:func:`may_be_mrz`); their MRZ reading is then ``read_mrz``'s (else the
        recogniser's, restricted to the MRZ characters)."""
        squeeze = self.settings.mrz_squeeze
        long = [i for i in range(len(crops)) if i not in short]
        mrz: dict[int, np.ndarray] = {}
        first: dict[int, tuple[np.ndarray, tuple[str, float]]] = {}  # read_mrz's, and its text
        if self.read_mrz is not None:
            for i, s in zip(long, self._recognise([crops[i] for i in long],
                                                  [squeeze] * len(long), self.read_mrz),
                            strict=True):
                first[i] = s, ctc_greedy(s, self.mrz_alphabet)
            mrz = {i: s for i, (s, read) in first.items() if surely_mrz(*read)}
        rest = [i for i in range(len(crops)) if i not in mrz]
        steps = dict(zip(rest, self._recognise([crops[i] for i in rest],
                                               [1.0 if i in short else squeeze
                                                for i in rest]),
                         strict=True))
        texts = {i: ctc_greedy(s, self.alphabet) for i, s in steps.items()}
        for i in rest:
            if i in short or not may_be_mrz(texts[i][0], crops[i], self.settings.mrz_min_aspect):
                continue
            if self.read_mrz is None:
                mrz[i] = steps[i]
            elif " " not in texts[i][0].strip():
                # Not one the MRZ reader was sure of: then no word break either (a long
                # visual-zone line of two words in capitals reads as an MRZ line otherwise).
                mrz[i] = first[i][0]
        for i, s in mrz.items():  # read_mrz's own reading, else the recogniser's, restricted
            texts[i] = first[i][1] if i in first else ctc_greedy(s, self.mrz_alphabet,
                                                                 self.mrz_classes)
        for i in long:
            if i not in mrz:
                del texts[i]
        return texts, mrz

    def _fit_mrz_lengths(self, found: list[_Page], readings: Readings,
                         steps: dict[tuple[int, int], np.ndarray]) -> None:
        """Whole MRZ lines read a few characters short, read again at the page's MRZ line
        length (:func:`kyc.document.ctc_length.ctc_fixed_length`, from the same
        probabilities): a run of fillers read from a squeezed crop loses some.

        The length: the longest MRZ line of the page, rounded up to a format's (30, 36,
        44). Whole: a crop at least :data:`WHOLE_LINE_WIDTH` of the page's widest MRZ
        crop (a line the detector cut in two is :meth:`_mend_mrz`'s). At most
        :data:`MAX_FILLERS_LOST` characters short.
        """
        for page, found_page in enumerate(found):
            keys = [key for key in steps if key[0] == page and key in readings]
            if not keys:
                continue
            target = line_length_for(max(len(readings[key][0]) for key in keys))
            widest = max(found_page.items[i][0].shape[1] for _, i in keys)
            for key in keys:
                text, _, _ = readings[key]
                whole = found_page.items[key[1]][0].shape[1] >= WHOLE_LINE_WIDTH * widest
                if target is None or not whole or not 0 < target - len(text) <= MAX_FILLERS_LOST:
                    continue
                fitted = ctc_fixed_length(steps[key], self.mrz_alphabet, target,
                                          self.mrz_classes)
                if fitted is not None:
                    readings[key] = (*fitted, True)

    def _recognise(self, crops: list[np.ndarray], squeeze: list[float],
                   recognise: Recogniser | None = None) -> list[np.ndarray]:
        """The ``[T, C]`` probabilities of each crop (padding cut off) from ``recognise``
        (default: the recogniser). A recogniser's stride is its answer's: the batch's
        width over its time steps (8 for PP-OCR, 4 for mrz_rec version 2)."""
        recognise = recognise or self.recognise
        results: list = [None] * len(crops)
        for batch in plan_batches(crops, self.settings.rec_max_batch,
                                  self.settings.rec_width_step,
                                  max_width=self.settings.rec_max_width, squeeze=squeeze):
            probs = recognise(batch.images)
            stride = max(1, batch.images.shape[2] // max(probs.shape[1], 1))
            for row, (index, width) in enumerate(zip(batch.indices, batch.widths, strict=True)):
                results[index] = probs[row, : -(-width // stride)]
        return results


def document_report(lines: Sequence[TextLine]) -> dict:
    """The contract's DOCUMENT: the MRZ found among the lines read as MRZ lines, its
    checks and fields."""
    mrz = [line for line in lines if line.mrz]
    return parse_mrz([line.text for line in mrz], options=[line.options for line in mrz],
                     visual=[line.text for line in lines if not line.mrz])


def _same_line(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two band boxes (TL, TR, BR, BL) are one line: their centres closer across
    the line than half its thickness (the pieces of a tilted line may make two rows)."""
    along = a[1] - a[0]
    normal = np.array([-along[1], along[0]]) / max(float(np.linalg.norm(along)), 1e-6)
    thickness = float(np.linalg.norm(a[3] - a[0]))
    return abs(float((a.mean(axis=0) - b.mean(axis=0)) @ normal)) < 0.5 * thickness


def _by_fit(indices: list[int], shapes: Sequence[tuple[int, ...]], values: set[str]
            ) -> list[int]:
    """``indices`` ordered by how well their crop's width fits one of ``values`` (the
    characters a crop of that height and width holds, :data:`CHAR_ASPECT`; in steps of
    a quarter of a log unit), then taller first (documents print the field values
    larger than their captions), then in reading order."""
    lengths = [len(v) for v in values]

    def misfit(i: int) -> float:
        height, width = shapes[i][:2]
        chars = width / max(height * CHAR_ASPECT, 1.0)
        return min(abs(np.log(max(chars, 0.5) / n)) for n in lengths)

    return sorted(indices, key=lambda i: (round(4 * misfit(i)), -shapes[i][0], i))

