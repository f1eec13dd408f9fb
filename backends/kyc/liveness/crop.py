"""The context crop that MiniFASNet anti-spoofing models are trained and run on.

minivision-ai/Silent-Face-Anti-Spoofing does not feed its models the face alone:
``CropImage`` (``src/generate_patches.py``) takes the face box enlarged ``scale``
times around its centre (2.7 or 4 for the published models: hair, background and a
screen's or a print's edges are the evidence), and resizes it to the model's input.
:func:`context_crop` reproduces that crop to the pixel, on an RGB frame instead of
the reference's BGR one (the crop does not mix channels; the exported model swaps
them itself).

The reference's steps, for a box ``x, y, w, h`` in a ``W`` x ``H`` frame:

1. the scale is capped so the enlarged box fits: ``min(scale, (H-1)/h, (W-1)/w)``;
2. the box is enlarged to ``w*scale`` x ``h*scale`` about its centre ``(x+w/2, y+h/2)``;
3. one that crosses the left/top edge is moved right/down to start at 0, one that
   crosses the right/bottom edge moved left/up to end at ``W-1``/``H-1`` (nothing is
   padded, so the face is off-centre in a crop near an edge);
4. the corners are truncated to integers and the pixels from the top-left corner to
   the bottom-right one, *both included*, are resized with ``cv2.resize`` (bilinear).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import cv2
import numpy as np


def _xywh(box: Sequence[float]) -> tuple[int, int, int, int]:
    """``(x1, y1, x2, y2)`` -> the reference's integer ``(x, y, w, h)``.

    Converted as the reference converts its detector's corners (``Detection.get_bbox``:
    ``int(left), int(top), int(right - left + 1), int(bottom - top + 1)``), so a box
    from a detector gives the crop the reference would make from the same corners.
    """
    values = np.asarray(box, dtype=np.float64).reshape(-1)
    if values.size != 4 or not np.all(np.isfinite(values)):
        raise ValueError(f"box must be 4 finite numbers (x1, y1, x2, y2), got {box!r}")
    x1, y1, x2, y2 = (float(v) for v in values)
    w, h = math.trunc(x2 - x1 + 1), math.trunc(y2 - y1 + 1)
    if w <= 0 or h <= 0:
        raise ValueError(f"box {tuple(values)} is empty: x2 < x1 or y2 < y1")
    return math.trunc(x1), math.trunc(y1), w, h


def crop_window(
    image_size: tuple[int, int], box: Sequence[float], scale: float
) -> tuple[int, int, int, int]:
    """Corners ``(left, top, right, bottom)``, all inclusive, of the pixels that
    :func:`context_crop` resizes; ``image_size`` is ``(height, width)``."""
    src_h, src_w = image_size
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive number, got {scale!r}")
    x, y, box_w, box_h = _xywh(box)
    # 1. no larger than the frame allows (its size less one, as the reference has it)
    scale = min(scale, (src_h - 1) / box_h, (src_w - 1) / box_w)
    # 2. enlarged about the centre
    new_w, new_h = box_w * scale, box_h * scale
    cx, cy = x + box_w / 2, y + box_h / 2
    left, right = cx - new_w / 2, cx + new_w / 2
    top, bottom = cy - new_h / 2, cy + new_h / 2
    # 3. moved back inside, keeping its size
    if left < 0:
        left, right = 0.0, right - left
    if top < 0:
        top, bottom = 0.0, bottom - top
    if right > src_w - 1:
        left, right = left - (right - src_w + 1), float(src_w - 1)
    if bottom > src_h - 1:
        top, bottom = top - (bottom - src_h + 1), float(src_h - 1)
    # 4. truncated as the reference's int()
    return math.trunc(left), math.trunc(top), math.trunc(right), math.trunc(bottom)


def context_crop(
    image: np.ndarray, box: Sequence[float], scale: float, size: int = 80
) -> np.ndarray:
    """The ``[size, size, 3]`` uint8 crop the reference's ``CropImage`` makes.

    Args:
        image: the frame, RGB uint8 ``[H, W, 3]`` (the crop is the same for BGR).
        box: the face box ``(x1, y1, x2, y2)`` in image pixels (corners, not
            ``x, y, w, h``): converted as described in :func:`_xywh`.
        scale: how many times the box is enlarged around its centre, as the model
            was trained (the number its checkpoint's name starts with, e.g. 2.7);
            capped where the frame is too small. ``org`` models, which take the
            whole frame, want ``cv2.resize(image, (size, size))`` instead.
        size: side of the model's square input.

    Returns:
        A new contiguous ``[size, size, 3]`` uint8 array. The window never leaves
        the frame (no padding): near an edge it is shifted inward, so the face is
        off-centre in the crop, as in the reference.
    """
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(
            f"image must be uint8 [H, W, 3], got {image.dtype} {list(image.shape)}"
        )
    if image.shape[0] < 2 or image.shape[1] < 2:
        raise ValueError(f"image {list(image.shape[:2])} is too small to crop")
    if size < 1:
        raise ValueError(f"size must be positive, got {size}")
    left, top, right, bottom = crop_window(image.shape[:2], box, scale)
    window = np.ascontiguousarray(image[top:bottom + 1, left:right + 1])
    return np.ascontiguousarray(cv2.resize(window, (size, size)))
