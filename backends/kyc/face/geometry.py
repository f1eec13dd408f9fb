"""Image geometry for the face path: quarter turns and face choice."""

from __future__ import annotations

import numpy as np


def unrotate_points(points: np.ndarray, quarter_turns: int, shape: tuple[int, int]) -> np.ndarray:
    """Points ``[..., 2]`` found in ``np.rot90(image, quarter_turns)`` mapped back to ``image``.

    ``shape`` is (height, width) of the original image; pixel-index coordinates.
    """
    height, width = shape
    points = np.asarray(points, dtype=np.float64)
    # One counter-clockwise turn of a W-wide frame maps (x, y) to (y, W - 1 - x):
    # undo the turns last first; the frames alternate between H x W and W x H.
    k = quarter_turns % 4
    frames = [(height, width) if i % 2 == 0 else (width, height) for i in range(k + 1)]
    for turn in range(k, 0, -1):
        prev_w = frames[turn - 1][1]
        x, y = points[..., 0], points[..., 1]
        points = np.stack([prev_w - 1 - y, x], axis=-1)
    return points


def unrotate_box(box: np.ndarray, quarter_turns: int, shape: tuple[int, int]) -> np.ndarray:
    """An axis-aligned box found in the rotated image, as a box of the original image."""
    x1, y1, x2, y2 = box
    corners = np.array([[x1, y1], [x2, y1], [x1, y2], [x2, y2]])
    mapped = unrotate_points(corners, quarter_turns, shape)
    return np.concatenate([mapped.min(axis=0), mapped.max(axis=0)])


def choose_face(boxes: np.ndarray, shape: tuple[int, int], min_size: float) -> int | None:
    """Index of the face to use: the largest, discounted by distance from the centre.

    Returns None when no box is at least ``min_size`` pixels on its short side.
    Priority = area x (1 - 0.5 x distance of box centre from image centre / half
    diagonal): a central face beats an equally large one at the edge, and a face
    twice as large wins unless it sits in a far corner.
    """
    if len(boxes) == 0:
        return None
    height, width = shape
    sides = np.minimum(boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1])
    area = np.clip(boxes[:, 2] - boxes[:, 0], 0, None) * np.clip(boxes[:, 3] - boxes[:, 1], 0,
                                                                   None)
    centres = (boxes[:, :2] + boxes[:, 2:]) / 2
    distance = np.linalg.norm(centres - np.array([width / 2, height / 2]), axis=1)
    priority = area * (1 - 0.5 * np.clip(distance / (np.hypot(width, height) / 2), 0, 1))
    priority = np.where(sides >= min_size, priority, -1.0)
    best = int(np.argmax(priority))
    return best if priority[best] >= 0 else None
