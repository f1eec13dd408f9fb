"""Text lines: perspective crops, reading order, batching for the recogniser, CTC decoding."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

REC_HEIGHT = 48
REC_STRIDE = 8  # the recogniser emits one time step per 8 input pixels of width
PAD_VALUE = 127  # mid grey: zero after the recogniser's baked (x / 127.5 - 1)


def crop_line(image: np.ndarray, box: np.ndarray) -> np.ndarray:
    """The quadrilateral ``box`` (TL, TR, BR, BL) of ``image`` warped to an upright rectangle.

    A crop much taller than wide is a vertical line: it is turned to read left to right.
    """
    box = np.asarray(box, dtype=np.float32)
    width = int(max(np.linalg.norm(box[0] - box[1]), np.linalg.norm(box[3] - box[2])))
    height = int(max(np.linalg.norm(box[0] - box[3]), np.linalg.norm(box[1] - box[2])))
    width, height = max(width, 1), max(height, 1)
    target = np.array([[0, 0], [width, 0], [width, height], [0, height]], dtype=np.float32)
    matrix = cv2.getPerspectiveTransform(box, target)
    crop = cv2.warpPerspective(image, matrix, (width, height), flags=cv2.INTER_CUBIC,
                               borderMode=cv2.BORDER_REPLICATE)
    if height >= 1.5 * width:
        crop = np.rot90(crop)
    return np.ascontiguousarray(crop)


def reading_rows(boxes: Sequence[np.ndarray]) -> list[list[int]]:
    """Indices of ``boxes`` in rows, top to bottom, left to right within a row.

    Boxes whose vertical centres are closer than half the smaller box height are on
    the same row. A box's height is its thickness (its shorter side), not its vertical
    extent: on a photo turned by a few degrees a long line's box spans several line
    pitches vertically, and two MRZ lines would otherwise make one row, read in the
    wrong order (measured: 5 of 30 harsh pages, 6 degrees, issue 37).
    """
    if not boxes:
        return []
    centres = np.array([b[:, 1].mean() for b in boxes])
    heights = np.array([max(_thickness(b), 1.0) for b in boxes])
    lefts = np.array([b[:, 0].min() for b in boxes])
    order = list(np.argsort(centres, kind="stable"))
    lines: list[list[int]] = []
    for i in order:
        if lines:
            last = lines[-1]
            line_centre = np.mean(centres[last])
            tolerance = 0.5 * min(heights[i], np.min(heights[last]))
            if abs(centres[i] - line_centre) <= tolerance:
                last.append(i)
                continue
        lines.append([i])
    return [[int(i) for i in sorted(line, key=lambda k: lefts[k])] for line in lines]


def _thickness(box: np.ndarray) -> float:
    """The shorter side of a four-corner box (corners in order around it)."""
    sides = np.linalg.norm(np.roll(box, -1, axis=0) - box, axis=1)
    return float(min(sides[0] + sides[2], sides[1] + sides[3]) / 2)


def reading_order(boxes: Sequence[np.ndarray]) -> list[int]:
    """Indices of ``boxes`` top to bottom, left to right within a row (:func:`reading_rows`)."""
    return [i for row in reading_rows(boxes) for i in row]


# An MRZ line beside a whole one: its centre 0.8 to 3 line heights away across the
# line (ICAO 9303 prints the lines about 1.5-2 character heights apart), its height
# 0.6 to 1.6 of the whole line's (one typeface, one size), and its pieces starting or
# ending within one line height of where the whole line does (every MRZ line starts
# at the same place and has the same length; a visual-zone row near an ID card's MRZ
# has the same pitch and size, but starts and ends elsewhere).
BAND_PITCH = (0.8, 3.0)
BAND_HEIGHT = (0.6, 1.6)
BAND_ALIGN = 1.0


def band_line(whole: np.ndarray, pieces: Sequence[np.ndarray]) -> np.ndarray | None:
    """The box of an MRZ line that the detector found cut in pieces, or only in part,
    from a whole MRZ line beside it (``whole``: TL, TR, BR, BL), or None when
    ``pieces`` (the boxes of one row) are not beside it.

    The lines of one MRZ start at the same place and have the same length (one
    monospace typeface, every line padded with fillers to its full length), and the DB
    detector sees long runs of fillers weakly: it may cut a line where they are, or
    miss the run at its end. So the line runs along the whole line's span, at the
    pieces' place and height across it (:data:`BAND_PITCH`, :data:`BAND_HEIGHT`,
    :data:`BAND_ALIGN`).
    """
    whole = np.asarray(whole, np.float64)
    along = (whole[1] - whole[0] + whole[2] - whole[3]) / 2
    length = float(np.linalg.norm(along))
    height = float(np.linalg.norm((whole[3] - whole[0] + whole[2] - whole[1]) / 2))
    if length <= 0 or height <= 0:
        return None
    u = along / length
    n = np.array([-u[1], u[0]])  # across the line, downwards on an upright page
    centre = whole.mean(axis=0)
    points = np.concatenate([np.asarray(p, np.float64).reshape(-1, 2) for p in pieces]) - centre
    across, spans = points @ n, points @ u
    offset = (across.max() + across.min()) / 2
    thickness = across.max() - across.min()
    beside = BAND_PITCH[0] * height <= abs(offset) <= BAND_PITCH[1] * height
    alike = BAND_HEIGHT[0] * height <= thickness <= BAND_HEIGHT[1] * height
    aligned = (abs(spans.min() + length / 2) <= BAND_ALIGN * height
               or abs(spans.max() - length / 2) <= BAND_ALIGN * height)
    if not (beside and alike and aligned):
        return None
    ends = [-length / 2, length / 2, length / 2, -length / 2]
    sides = [-thickness / 2, -thickness / 2, thickness / 2, thickness / 2]
    return np.array([centre + e * u + (offset + s) * n for e, s in zip(ends, sides, strict=True)],
                    np.float32)


def resize_for_rec(crop: np.ndarray, max_width: int, squeeze: float = 1.0) -> np.ndarray:
    """``crop`` scaled to the recogniser's height (its width also by ``squeeze``)."""
    height, width = crop.shape[:2]
    new_width = round(width * REC_HEIGHT / max(height, 1) * squeeze)
    new_width = int(np.clip(new_width, REC_STRIDE, max_width))
    return cv2.resize(crop, (new_width, REC_HEIGHT), interpolation=cv2.INTER_LINEAR)


@dataclass(frozen=True)
class RecBatch:
    """Crops padded to one width for one recogniser call, and where they came from."""

    indices: list[int]
    images: np.ndarray  # [N, 48, W, 3] uint8
    widths: list[int]  # content width of each crop (the rest is padding)


def plan_batches(lines: Sequence[np.ndarray], max_batch: int, width_step: int = 64,
                 max_width: int = 1600, squeeze: float | Sequence[float] = 1.0
                 ) -> list[RecBatch]:
    """Recogniser calls for ``lines``: each crop is padded to its own width rounded up
    to ``width_step`` (a multiple of the stride), and crops of one padded width share
    calls of at most ``max_batch``, narrowest first (RapidOCR's habit of sorting by
    width and batching, with the padding fixed per crop).

    Why the padding depends on the crop alone: the recogniser mixes the whole width of
    a row (SVTR's global blocks), so a crop padded wider reads differently (measured:
    class probabilities move by up to 0.1), and a width set by the widest crop of the
    call made a customer's reading depend on the other customers' lines batched with
    it. The rows of one call do not affect each other. ``squeeze``: one factor for
    every crop, or one per crop."""
    if width_step < REC_STRIDE or width_step % REC_STRIDE:
        raise ValueError(f"width_step must be a multiple of {REC_STRIDE}, got {width_step}")
    factors = [squeeze] * len(lines) if isinstance(squeeze, (int, float)) else list(squeeze)
    if len(factors) != len(lines):
        raise ValueError(f"{len(factors)} squeeze factors for {len(lines)} crops")
    resized = [resize_for_rec(line, max_width, f) for line, f in zip(lines, factors, strict=True)]
    by_width: dict[int, list[int]] = {}
    for i in sorted(range(len(resized)), key=lambda i: resized[i].shape[1]):
        by_width.setdefault(-(-resized[i].shape[1] // width_step) * width_step, []).append(i)
    return [_pack(group[k: k + max_batch], resized, width)
            for width, group in sorted(by_width.items())
            for k in range(0, len(group), max_batch)]


def _pack(group: list[int], resized: list[np.ndarray], width: int) -> RecBatch:
    images = np.full((len(group), REC_HEIGHT, width, 3), PAD_VALUE, dtype=np.uint8)
    for row, i in enumerate(group):
        images[row, :, : resized[i].shape[1]] = resized[i]
    return RecBatch(indices=list(group), images=images,
                    widths=[resized[i].shape[1] for i in group])


def ctc_greedy(probs: np.ndarray, alphabet: Sequence[str],
               allowed: np.ndarray | None = None) -> tuple[str, float]:
    """Best path of one line's ``[T, C]`` class probabilities (class 0 = blank).

    ``allowed`` (a boolean mask over classes) restricts the reading, e.g. to the MRZ
    alphabet; the blank is always allowed. Confidence = mean probability of the
    characters kept (1.0 for an empty reading).
    """
    if allowed is not None:
        mask = allowed.copy()
        mask[0] = True
        probs = np.where(mask[None, :], probs, 0.0)
    best = probs.argmax(axis=1)
    best_prob = probs[np.arange(len(best)), best]
    keep = (best != 0) & np.concatenate([[True], best[1:] != best[:-1]])
    text = "".join(alphabet[c - 1] for c in best[keep])
    confidence = float(best_prob[keep].mean()) if keep.any() else 1.0
    return text, confidence


def class_mask(alphabet: Sequence[str], characters: str) -> np.ndarray:
    """Boolean mask over the recogniser's classes (blank first) allowing ``characters``."""
    allowed = set(characters)
    return np.array([True] + [c in allowed for c in alphabet], dtype=bool)
