"""Decoding client images safely: limits checked on the header, before any pixel is decoded.

Encoded bytes come from clients, so every image is first checked against a byte
limit, then opened lazily (Pillow reads only the header), its format, pixel count
and pixels per encoded byte checked, and only then decoded. EXIF orientation is
applied, so every coordinate this package reports is in the pixels of the image as
it is meant to be displayed. Large JPEGs are decoded straight at a reduced scale (libjpeg's
DCT scaling) when they exceed ``work_max_side``; :class:`DecodedImage` keeps
the factor that maps working pixels back to input pixels.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps

ALLOWED_FORMATS = frozenset({"JPEG", "PNG", "WEBP"})

# Declared pixels per encoded byte: what a client's byte buys of the server's decoding.
# Measured (docs/reliability.md): the test photos 3.5-4.6, `kyc eval samples`' documents
# up to 10.6 and liveness frames up to 7.0 (JPEG), frames of the project's videos up to
# 52 (WebP of a frame upscaled 4x, smoother than any camera's); a 1-bit PNG of 6300x6300
# black pixels 8080 (4.9 KB), an all-black 8-bit RGB PNG about 340. About twice the
# highest real figure.
MAX_PIXELS_PER_BYTE = 100.0
# Smaller images are cheap however well they compress (and tiny test PNGs do).
RATIO_FROM_PIXELS = 1_000_000


class ImageError(ValueError):
    """The request's image cannot be used; the message says why (no image content)."""


@dataclass(frozen=True)
class ImageLimits:
    """Limits on client images (defaults: the settings of the model using them)."""

    max_bytes: int
    max_pixels: int
    # Decoded images larger than this (longest side) are reduced while decoding.
    work_max_side: int
    # Past RATIO_FROM_PIXELS, refused above this many declared pixels per byte; 0: no bound.
    max_pixels_per_byte: float = MAX_PIXELS_PER_BYTE


@dataclass(frozen=True)
class DecodedImage:
    """RGB pixels to work on, and how they relate to the input image."""

    pixels: np.ndarray  # [H, W, 3] uint8, RGB, EXIF orientation applied
    input_size: tuple[int, int]  # (width, height) of the oriented input image
    scale: float  # working pixels * scale = input pixels
    format: str


def _open(data: bytes, limits: ImageLimits) -> Image.Image:
    if len(data) == 0:
        raise ImageError("the image is empty (0 bytes)")
    if len(data) > limits.max_bytes:
        raise ImageError(
            f"the image has {len(data)} bytes, more than the limit of {limits.max_bytes}"
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise ImageError(
            f"the image header declares more pixels than the limit of {limits.max_pixels}"
        ) from None
    except Exception:
        raise ImageError("the bytes are not a JPEG, PNG or WebP image") from None
    if image.format not in ALLOWED_FORMATS:
        raise ImageError(f"image format {image.format} is not accepted (JPEG, PNG or WebP)")
    width, height = image.size
    if width <= 0 or height <= 0 or width * height > limits.max_pixels:
        raise ImageError(
            f"the image header declares {width}x{height} pixels, more than the limit of "
            f"{limits.max_pixels}"
        )
    _check_density(width * height, len(data), limits.max_pixels_per_byte)
    return image


def _check_density(pixels: int, size: int, limit: float) -> None:
    """A decompression bomb: far more pixels than real images pack in ``size`` bytes."""
    if limit > 0 and pixels > RATIO_FROM_PIXELS and pixels > limit * size:
        raise ImageError(
            f"the image header declares {pixels} pixels for {size} bytes, more than "
            f"{limit:g} pixels per byte (a decompression bomb)")


def decode_image(data: bytes, limits: ImageLimits) -> DecodedImage:
    """Decode ``data`` (JPEG, PNG or WebP) to RGB, or raise :class:`ImageError`."""
    image = _open(data, limits)
    fmt = image.format
    full_width, full_height = image.size
    if fmt == "JPEG" and max(image.size) > limits.work_max_side:
        # DCT scaling by 1/2, 1/4 or 1/8 while staying at least work_max_side.
        factor = max(image.size) / limits.work_max_side
        image.draft("RGB", (round(full_width / factor), round(full_height / factor)))
    try:
        oriented = _upright_rgb(image)
        rgb = np.asarray(oriented)
    except Exception as exc:  # truncated or corrupt pixel data
        raise ImageError(f"the {fmt} image cannot be decoded: {_reason(exc)}") from None
    transposed = oriented.size != image.size and oriented.size == image.size[::-1]
    input_size = (full_height, full_width) if transposed else (full_width, full_height)
    rgb, scale = _reduce(rgb, input_size[0], limits.work_max_side)
    return DecodedImage(pixels=rgb, input_size=input_size, scale=scale, format=fmt)


def _upright_rgb(image: Image.Image) -> Image.Image:
    """The decoded image turned as its EXIF orientation says, in RGB. No copy where
    none is needed (no orientation to apply, already RGB): each copy of a frame cost
    about as much as decoding it at half size (measured: 4.0 -> 2.0 ms for a 720x900
    JPEG)."""
    image.load()
    if image.getexif().get(EXIF_ORIENTATION, 1) != 1:
        image = ImageOps.exif_transpose(image)
    return image if image.mode == "RGB" else image.convert("RGB")


EXIF_ORIENTATION = 0x0112


def check_image(data: bytes, limits: ImageLimits) -> tuple[str, tuple[int, int]]:
    """Raise :class:`ImageError` where :func:`decode_image` would, decoding as little as
    possible; else the format and the (unoriented) size.

    Every pixel of the entropy-coded data is still read, so truncated or broken data
    is found, but a JPEG is decoded at 1/8 scale (DCT scaling), which is most of
    its cost saved. PNG and WebP have no reduced decode and cost a full one."""
    image = _open(data, limits)
    fmt, size = image.format, image.size
    if fmt == "JPEG":
        image.draft("RGB", (1, 1))  # the smallest scale libjpeg offers (1/8)
    try:
        ImageOps.exif_transpose(image).convert("RGB")
    except Exception as exc:  # truncated or corrupt pixel data
        raise ImageError(f"the {fmt} image cannot be decoded: {_reason(exc)}") from None
    return fmt, size


# An image at most this share over ``work_max_side`` is kept as decoded: a resize that
# close to the identity is a full pass over the pixels (1.5 ms for a 450-pixel frame
# decoded at half size for a limit of 448) and changes nothing the limit is for.
REDUCE_SLACK = 1 / 16


def _reduce(rgb: np.ndarray, input_width: int, max_side: int) -> tuple[np.ndarray, float]:
    height, width = rgb.shape[:2]
    if max(height, width) > max_side * (1 + REDUCE_SLACK):
        factor = max_side / max(height, width)
        size = (max(1, round(width * factor)), max(1, round(height * factor)))
        rgb = np.asarray(Image.fromarray(rgb).resize(size, Image.Resampling.BILINEAR))
    return np.ascontiguousarray(rgb), input_width / rgb.shape[1]


def _reason(exc: Exception) -> str:
    text = str(exc).strip()
    # Pillow's messages name the problem ("image file is truncated (3 bytes not processed)");
    # they never contain pixel data. Keep them short.
    return (text[:160] or type(exc).__name__).rstrip(".")


@dataclass(frozen=True)
class Letterbox:
    """Where an image sits in a square detector canvas (top-left, scaled to fit)."""

    scale_x: float  # canvas pixels per image pixel
    scale_y: float

    def to_image(self, points: np.ndarray) -> np.ndarray:
        """Canvas coordinates ``[..., 2]`` (or boxes ``[..., 4]``) to image coordinates."""
        factors = np.array([self.scale_x, self.scale_y] * (points.shape[-1] // 2))
        return points / factors


# A page-shaped canvas keeps at least this many black rows (or columns) beyond the
# page: the detector reads a line at the page's edge differently when the canvas ends
# right under it (measured: 1 of 12 held-in MRZs read differently without a margin).
PAGE_MARGIN = 32


def letterbox(image: np.ndarray, size: int, short_step: int = 0
              ) -> tuple[np.ndarray, Letterbox]:
    """``image`` scaled so that its longer side is ``size``, at the top-left corner of a
    black canvas: ``size`` x ``size``, or with ``short_step`` the shorter side rounded
    up to a multiple of it (a page-shaped canvas: fewer pixels for the detector)."""
    height, width = image.shape[:2]
    factor = size / max(height, width)
    new_w, new_h = max(1, round(width * factor)), max(1, round(height * factor))
    shape = (size, size)
    if short_step:
        def fitted(side: int) -> int:  # at least PAGE_MARGIN of padding below the page
            return min(size, -(-(side + PAGE_MARGIN) // short_step) * short_step)

        shape = (fitted(new_h), size) if width >= height else (size, fitted(new_w))
    canvas = np.zeros((*shape, 3), dtype=np.uint8)
    if (new_w, new_h) == (width, height):
        canvas[:height, :width] = image
    else:
        resized = Image.fromarray(image).resize((new_w, new_h), Image.Resampling.BILINEAR)
        canvas[:new_h, :new_w] = np.asarray(resized)
    return canvas, Letterbox(scale_x=new_w / width, scale_y=new_h / height)
