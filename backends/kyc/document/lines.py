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


def reading_order(boxes: Sequence[np.ndarray]) -> list[int]:
    """Indices of ``boxes`` top to bottom, left to right within a line.

    Boxes whose vertical centres are closer than half the smaller box height are on
    the same line.
    """
    if not boxes:
        return []
    centres = np.array([b[:, 1].mean() for b in boxes])
    heights = np.array([max(b[:, 1].max() - b[:, 1].min(), 1.0) for b in boxes])
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
    return [int(i) for line in lines for i in sorted(line, key=lambda k: lefts[k])]


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


def plan_batches(lines: Sequence[np.ndarray], max_batch: int, max_waste: float = 0.5,
                 max_width: int = 1600, squeeze: float | Sequence[float] = 1.0
                 ) -> list[RecBatch]:
    """As few recogniser calls as possible: crops sorted by width, packed into groups in
    which padding is at most ``max_waste`` of the widest crop, at most ``max_batch``
    crops each (the RapidOCR habit: sort by aspect ratio, batch, restore the order).
    ``squeeze``: one factor for every crop, or one per crop."""
    factors = [squeeze] * len(lines) if isinstance(squeeze, (int, float)) else list(squeeze)
    if len(factors) != len(lines):
        raise ValueError(f"{len(factors)} squeeze factors for {len(lines)} crops")
    resized = [resize_for_rec(line, max_width, f) for line, f in zip(lines, factors, strict=True)]
    order = sorted(range(len(resized)), key=lambda i: resized[i].shape[1])
    batches: list[RecBatch] = []
    group: list[int] = []
    for i in order:
        widest = resized[i].shape[1]
        narrowest = resized[group[0]].shape[1] if group else widest
        if group and (len(group) >= max_batch or narrowest < (1 - max_waste) * widest):
            batches.append(_pack(group, resized))
            group = []
        group.append(i)
    if group:
        batches.append(_pack(group, resized))
    return batches


def _pack(group: list[int], resized: list[np.ndarray]) -> RecBatch:
    width = -(-max(resized[i].shape[1] for i in group) // REC_STRIDE) * REC_STRIDE
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
