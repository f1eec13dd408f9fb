"""DB (differentiable binarisation) postprocess of a PP-OCR text probability map.

The steps of PaddleOCR's ``DBPostProcess``, written here on OpenCV and pyclipper
(the polygon-offset library PaddleOCR itself uses): binarise the map, take the
outer contours, fit a minimum-area rectangle to each, score it by the mean
probability inside, grow ("unclip") it by ``area * unclip_ratio / perimeter``
(the shrink the model was trained with, undone), and fit the rectangle again.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
import pyclipper


@dataclass(frozen=True)
class DBSettings:
    thresh: float = 0.3  # pixel probability that counts as text
    box_thresh: float = 0.6  # mean probability inside a box to keep it
    unclip_ratio: float = 1.5
    max_candidates: int = 1000
    min_size: float = 3.0  # short side in map pixels, before and after unclipping


@dataclass(frozen=True)
class TextBox:
    points: np.ndarray  # [4, 2] float32, clockwise from top-left, map pixels
    score: float


def order_points(points: np.ndarray) -> np.ndarray:
    """Four corners ordered top-left, top-right, bottom-right, bottom-left."""
    pts = np.asarray(points, dtype=np.float32).reshape(4, 2)
    by_x = pts[np.argsort(pts[:, 0], kind="stable")]
    left, right = by_x[:2], by_x[2:]
    top_left, bottom_left = left[np.argsort(left[:, 1], kind="stable")]
    top_right, bottom_right = right[np.argsort(right[:, 1], kind="stable")]
    return np.stack([top_left, top_right, bottom_right, bottom_left])


def _min_box(contour: np.ndarray) -> tuple[np.ndarray, float]:
    rect = cv2.minAreaRect(contour)
    return order_points(cv2.boxPoints(rect)), min(rect[1])


def _box_score(prob: np.ndarray, box: np.ndarray) -> float:
    """Mean probability inside the (rotated) box, computed on its bounding window."""
    height, width = prob.shape
    x0 = int(np.clip(np.floor(box[:, 0].min()), 0, width - 1))
    x1 = int(np.clip(np.ceil(box[:, 0].max()), 0, width - 1))
    y0 = int(np.clip(np.floor(box[:, 1].min()), 0, height - 1))
    y1 = int(np.clip(np.ceil(box[:, 1].max()), 0, height - 1))
    mask = np.zeros((y1 - y0 + 1, x1 - x0 + 1), dtype=np.uint8)
    cv2.fillPoly(mask, [(box - [x0, y0]).astype(np.int32)], 1)
    return float(cv2.mean(prob[y0: y1 + 1, x0: x1 + 1], mask)[0])


def _unclip(box: np.ndarray, ratio: float) -> np.ndarray | None:
    area = cv2.contourArea(box)
    perimeter = cv2.arcLength(box, True)
    if perimeter <= 0:
        return None
    distance = area * ratio / perimeter
    offset = pyclipper.PyclipperOffset()
    offset.AddPath([tuple(p) for p in box.round().astype(np.int64).tolist()],
                   pyclipper.JT_ROUND, pyclipper.ET_CLOSEDPOLYGON)
    grown = offset.Execute(distance)
    if len(grown) != 1:
        return None
    return np.asarray(grown[0], dtype=np.float32)


def text_boxes(prob: np.ndarray, settings: DBSettings) -> list[TextBox]:
    """Text boxes in ``prob`` ([H, W] probabilities), in map pixel coordinates."""
    bitmap = (prob > settings.thresh).astype(np.uint8)
    contours, _ = cv2.findContours(bitmap, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
    boxes = []
    for contour in contours[: settings.max_candidates]:
        box, short = _min_box(contour.reshape(-1, 2))
        if short < settings.min_size:
            continue
        score = _box_score(prob, box)
        if score < settings.box_thresh:
            continue
        grown = _unclip(box, settings.unclip_ratio)
        if grown is None:
            continue
        box, short = _min_box(grown)
        if short < settings.min_size + 2:
            continue
        height, width = prob.shape
        box[:, 0] = np.clip(box[:, 0], 0, width)
        box[:, 1] = np.clip(box[:, 1], 0, height)
        boxes.append(TextBox(points=box, score=score))
    return boxes
