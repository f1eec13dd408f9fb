"""RetinaFace post-processing: priors, vectorised box/landmark decoding and NMS.

The served ``face_detector`` answers, per image, one row per prior: box deltas
``LOC [P, 4]``, face probabilities ``SCORES [P]`` and landmark deltas
``LANDMARKS [P, 10]``. Priors follow RetinaFace (MobileNet-0.25): strides 8, 16
and 32 with two square anchors each, variances 0.1 (centres) and 0.2 (sizes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

STEPS = (8, 16, 32)
MIN_SIZES = ((16, 32), (64, 128), (256, 512))
VARIANCES = (0.1, 0.2)


@lru_cache(maxsize=64)
def priors(height: int, width: int) -> np.ndarray:
    """``[P, 4]`` anchors (cx, cy, w, h) in pixels, in the model's output order."""
    blocks = []
    for step, sizes in zip(STEPS, MIN_SIZES, strict=True):
        rows, cols = math.ceil(height / step), math.ceil(width / step)
        cy, cx = np.meshgrid((np.arange(rows) + 0.5) * step, (np.arange(cols) + 0.5) * step,
                             indexing="ij")
        grid = np.stack([cx, cy], axis=-1).reshape(-1, 1, 2)  # [cells, 1, 2]
        size = np.array(sizes, dtype=np.float64).reshape(1, -1, 1)  # [1, anchors, 1]
        anchors = np.concatenate(
            [np.broadcast_to(grid, (grid.shape[0], len(sizes), 2)),
             np.broadcast_to(size, (grid.shape[0], len(sizes), 2))], axis=-1)
        blocks.append(anchors.reshape(-1, 4))
    table = np.concatenate(blocks).astype(np.float32)
    table.setflags(write=False)
    return table


@dataclass(frozen=True)
class Detections:
    """Faces found in one image, best score first (coordinates in detector pixels)."""

    boxes: np.ndarray  # [K, 4] x1, y1, x2, y2
    scores: np.ndarray  # [K]
    landmarks: np.ndarray  # [K, 5, 2]

    def __len__(self) -> int:
        return len(self.scores)


def decode(loc: np.ndarray, landmarks: np.ndarray, anchors: np.ndarray) -> tuple[np.ndarray,
                                                                               np.ndarray]:
    """Boxes ``[..., 4]`` and landmarks ``[..., 5, 2]`` from deltas (any leading dims)."""
    centre, size = anchors[..., :2], anchors[..., 2:]
    box_centre = centre + loc[..., :2] * VARIANCES[0] * size
    box_size = size * np.exp(loc[..., 2:] * VARIANCES[1])
    boxes = np.concatenate([box_centre - box_size / 2, box_centre + box_size / 2], axis=-1)
    points = landmarks.reshape(*landmarks.shape[:-1], 5, 2)
    points = centre[..., None, :] + points * VARIANCES[0] * size[..., None, :]
    return boxes, points


def nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Indices kept by greedy non-maximum suppression, best score first."""
    order = np.argsort(-scores, kind="stable")
    boxes = boxes[order]
    areas = np.clip(boxes[:, 2] - boxes[:, 0], 0, None) * np.clip(boxes[:, 3] - boxes[:, 1], 0,
                                                                    None)
    # One IoU matrix for all candidates, then a greedy pass over booleans.
    x1 = np.maximum(boxes[:, None, 0], boxes[None, :, 0])
    y1 = np.maximum(boxes[:, None, 1], boxes[None, :, 1])
    x2 = np.minimum(boxes[:, None, 2], boxes[None, :, 2])
    y2 = np.minimum(boxes[:, None, 3], boxes[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    iou = inter / np.maximum(areas[:, None] + areas[None, :] - inter, 1e-9)
    suppressed = np.zeros(len(order), dtype=bool)
    keep = []
    for i in range(len(order)):
        if suppressed[i]:
            continue
        keep.append(i)
        suppressed |= iou[i] > iou_threshold
    return order[np.array(keep, dtype=np.int64)]


def detect_batch(
    loc: np.ndarray,
    scores: np.ndarray,
    landmarks: np.ndarray,
    height: int,
    width: int,
    score_threshold: float,
    iou_threshold: float,
    top_k: int = 500,
) -> list[Detections]:
    """Per image of a ``[N, P, ...]`` batch: decoded faces above the threshold after NMS."""
    anchors = priors(height, width)
    if loc.shape[1] != len(anchors):
        raise ValueError(
            f"face_detector returned {loc.shape[1]} priors for a {width}x{height} batch, "
            f"expected {len(anchors)}"
        )
    image_index, prior_index = np.nonzero(scores > score_threshold)
    boxes, points = decode(loc[image_index, prior_index], landmarks[image_index, prior_index],
                           anchors[prior_index])
    candidate_scores = scores[image_index, prior_index]
    found = []
    for n in range(loc.shape[0]):
        mine = np.flatnonzero(image_index == n)
        if len(mine) > top_k:
            mine = mine[np.argsort(-candidate_scores[mine], kind="stable")[:top_k]]
        keep = mine[nms(boxes[mine], candidate_scores[mine], iou_threshold)] if len(mine) else mine
        found.append(Detections(boxes=boxes[keep].astype(np.float32),
                                scores=candidate_scores[keep].astype(np.float32),
                                landmarks=points[keep].astype(np.float32)))
    return found
