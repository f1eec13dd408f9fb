"""A seeded corpus of hostile requests for the client-facing models.

Every case says what it sends, to which model, and how it must end: with its own
INVALID_ARGUMENT error, with a documented safe result, or (for corrupted pixel data
that still decodes) either an answer or that error. Built from one real photo so
that every malformed image is a real encoding broken in a known way. No server is
needed to build it; ``tests/integration/test_hostile_inputs.py`` sends it.

Expected outcomes:

* ``INVALID``: gRPC INVALID_ARGUMENT with a message saying what is wrong;
* ``ANSWER_OR_INVALID``: corrupted entropy-coded data may still decode to a damaged
  picture, which is answered like any photo; otherwise INVALID_ARGUMENT;
* ``TOKEN_INVALID``: the request is answered, never ``approve``, with the reason
  ``liveness_token_invalid`` (a token is evidence, not input format).
"""

from __future__ import annotations

import io
import struct
import zlib
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

INVALID = "INVALID"
ANSWER_OR_INVALID = "ANSWER_OR_INVALID"
TOKEN_INVALID = "TOKEN_INVALID"

IMAGE_INPUT = {"face_preprocess": "IMAGE", "document_ocr": "IMAGE",
               "liveness_sequence": "FRAME"}
ENSEMBLE_IMAGES = ("DOCUMENT_IMAGE", "SELFIE_IMAGE")
BOMB_SIDE = 60000  # a header claiming 60000 x 60000 pixels (3.6 G)


@dataclass(frozen=True)
class Tensor:
    name: str
    array: np.ndarray
    datatype: str  # Triton's: BYTES, FP32, UINT8...


@dataclass(frozen=True)
class Step:
    """One request; ``sequence`` = (start, end) flags for liveness_sequence."""

    inputs: tuple[Tensor, ...]
    expect: str
    sequence: tuple[bool, bool] | None = None


@dataclass(frozen=True)
class Case:
    kind: str  # the hostile class
    model: str
    steps: tuple[Step, ...]
    # liveness_sequence: the correlation id to use (None: a fresh one per case)
    sequence_id: int | str | None = field(default=None)


def encoded(name: str, data: bytes) -> Tensor:
    return Tensor(name, np.array([[data]], dtype=np.object_), "BYTES")


# -- broken images ------------------------------------------------------------------
def encodings(photo: np.ndarray) -> dict[str, bytes]:
    """The photo as JPEG, PNG and WebP."""
    out = {}
    for fmt in ("JPEG", "PNG", "WEBP"):
        buffer = io.BytesIO()
        Image.fromarray(photo).save(buffer, fmt, quality=90)
        out[fmt] = buffer.getvalue()
    return out


def truncated(data: bytes, fraction: float) -> bytes:
    return data[:max(1, int(len(data) * fraction))]


def corrupted(data: bytes, rng: np.random.Generator, flips: int) -> bytes:
    """``flips`` random bytes of the second half (the entropy-coded data) changed."""
    out = bytearray(data)
    for index in rng.integers(len(data) // 2, len(data) - 4, flips):
        out[index] ^= int(rng.integers(1, 256))
    return bytes(out)


def png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_claiming(png: bytes, width: int, height: int) -> bytes:
    """A valid PNG whose IHDR (CRC fixed) claims ``width`` x ``height``."""
    ihdr = bytearray(png[16:29])
    ihdr[0:8] = struct.pack(">II", width, height)
    return png[:8] + png_chunk(b"IHDR", bytes(ihdr)) + png[33:]


def jpeg_claiming(jpeg: bytes, width: int, height: int) -> bytes:
    """The JPEG with its frame header (SOF0/SOF2) claiming ``width`` x ``height``."""
    out = bytearray(jpeg)
    for marker in (b"\xff\xc0", b"\xff\xc2"):
        at = jpeg.find(marker)
        if at > 0:
            out[at + 5:at + 9] = struct.pack(">HH", min(height, 65535), min(width, 65535))
            return bytes(out)
    raise ValueError("no SOF marker")


def webp_claiming(webp: bytes, width: int, height: int) -> bytes:
    """A lossy WebP whose VP8 frame header claims ``width`` x ``height`` (14 bits each)."""
    if webp[12:16] != b"VP8 ":
        raise ValueError("not a simple lossy WebP")
    out = bytearray(webp)
    out[26:30] = struct.pack("<HH", min(width, 0x3FFF), min(height, 0x3FFF))
    return bytes(out)


def genuine_png_bomb(side: int = 12000) -> bytes:
    """A real 1-bit PNG of ``side`` x ``side`` black pixels: a few KB on the wire,
    ``side``² pixels once decoded."""
    raw = zlib.compress((b"\x00" + b"\x00" * ((side + 7) // 8)) * side, 9)
    header = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", raw)
            + png_chunk(b"IEND", b""))


def broken_images(photo: np.ndarray, rng: np.random.Generator,
                  random_count: int) -> list[tuple[str, bytes, str]]:
    """(class, bytes, expected outcome) of every broken image."""
    enc = encodings(photo)
    out: list[tuple[str, bytes, str]] = []
    for k in range(random_count):
        size = int(rng.choice([1, 3, 16, 100, 1000, 20000]))
        out.append(("random_bytes", rng.bytes(size), INVALID))
        if k % 3 == 0:  # a real magic number, then garbage
            magic = (b"\xff\xd8\xff\xe0", b"\x89PNG\r\n\x1a\n", b"RIFF\x00\x00\x00\x00WEBPVP8 ")
            out.append(("magic_then_garbage", magic[(k // 3) % 3] + rng.bytes(size), INVALID))
    for fmt, data in enc.items():
        for fraction in (0.02, 0.1, 0.25, 0.5, 0.75, 0.9):
            out.append((f"truncated_{fmt.lower()}", truncated(data, fraction), INVALID))
        for flips in (1, 4, 16, 64, 256):
            out.append((f"corrupt_{fmt.lower()}", corrupted(data, rng, flips), ANSWER_OR_INVALID))
    out += [("decompression_bomb", png_claiming(enc["PNG"], BOMB_SIDE, BOMB_SIDE), INVALID),
            ("decompression_bomb", png_claiming(enc["PNG"], 7000, 7000), INVALID),
            ("decompression_bomb", jpeg_claiming(enc["JPEG"], BOMB_SIDE, BOMB_SIDE), INVALID),
            ("decompression_bomb", jpeg_claiming(enc["JPEG"], 65535, 1000), INVALID),
            ("decompression_bomb", webp_claiming(enc["WEBP"], 0x3FFF, 0x3FFF), INVALID),
            ("decompression_bomb", genuine_png_bomb(), INVALID),
            # under the photo's pixel limit: refused for its 8080 pixels per byte
            ("decompression_bomb", genuine_png_bomb(6300), INVALID),
            ("zero_length", b"", INVALID)]
    gif = io.BytesIO()
    Image.fromarray(photo).save(gif, "GIF")
    out.append(("unsupported_format", gif.getvalue(), INVALID))
    return out


# -- the corpus -----------------------------------------------------------------------
def wrong_tensors(name: str) -> list[tuple[str, Tensor]]:
    """(class, tensor) for an image input given with a wrong dtype, shape or batch."""
    ok = b"\xff\xd8\xff"
    return [
        ("wrong_dtype", Tensor(name, np.zeros((1, 1), np.float32), "FP32")),
        ("wrong_dtype", Tensor(name, np.zeros((1, 1), np.uint8), "UINT8")),
        ("wrong_dtype", Tensor(name, np.zeros((1, 1), np.int64), "INT64")),
        ("wrong_shape", Tensor(name, np.array([[ok, ok]], dtype=np.object_), "BYTES")),
        ("wrong_shape", Tensor(name, np.array([[[ok]]], dtype=np.object_), "BYTES")),
        ("wrong_batch", Tensor(name, np.array([[ok]] * 9, dtype=np.object_), "BYTES")),
        ("wrong_batch", Tensor(name, np.array([[ok]] * 64, dtype=np.object_), "BYTES")),
    ]


def corpus(photo: np.ndarray, filler: bytes, document: bytes, selfie: bytes,
           max_bytes: dict[str, int], seed: int = 0, random_count: int = 50) -> list[Case]:
    """Every hostile case. ``photo`` (RGB) is broken in known ways; ``filler`` (a small
    valid image) fills kyc_ensemble's other image input, ``document`` and ``selfie``
    (a valid pair) go with the hostile tokens; ``max_bytes`` is each model's byte
    limit (its config's ``max_image_bytes``)."""
    rng = np.random.default_rng(seed)
    images = broken_images(photo, rng, random_count)
    cases: list[Case] = []
    no_token = encoded("LIVENESS_TOKEN", b"")

    for model in ("face_preprocess", "document_ocr"):
        name = IMAGE_INPUT[model]
        cases += [Case(kind, model, (Step((encoded(name, data),), expect),))
                  for kind, data, expect in images]
        cases.append(Case("oversized", model, (Step((encoded(
            name, b"\xff\xd8\xff\xe0" + bytes(max_bytes[model] - 3)),), INVALID),)))
        cases += [Case(kind, model, (Step((tensor,), INVALID),)) for kind, tensor in
                  wrong_tensors(name)]
        cases.append(Case("missing_input", model, (Step((), INVALID),)))
        cases.append(Case("unknown_input", model, (Step((encoded(name, filler),
                                                         encoded("EXTRA", b"x")), INVALID),)))

    # kyc_ensemble: the broken image as the document, then as the selfie
    for k, (kind, data, expect) in enumerate(images):
        slot, other_slot = ENSEMBLE_IMAGES[k % 2], ENSEMBLE_IMAGES[1 - k % 2]
        cases.append(Case(kind, "kyc_ensemble", (Step((
            encoded(slot, data), encoded(other_slot, filler), no_token), expect),)))
    cases.append(Case("oversized", "kyc_ensemble", (Step((
        encoded("DOCUMENT_IMAGE", b"\xff\xd8\xff\xe0" + bytes(max_bytes["kyc_ensemble"] - 3)),
        encoded("SELFIE_IMAGE", filler), no_token), INVALID),)))
    for kind, tensor in wrong_tensors("SELFIE_IMAGE"):
        cases.append(Case(kind, "kyc_ensemble", (Step((
            encoded("DOCUMENT_IMAGE", filler), tensor, no_token), INVALID),)))
    cases.append(Case("missing_input", "kyc_ensemble", (Step((
        encoded("DOCUMENT_IMAGE", filler), encoded("SELFIE_IMAGE", filler)), INVALID),)))
    tokens = [("garbage_token", rng.bytes(n)) for n in (1, 40, 300)]
    tokens += [("non_utf8_token", b"kyc1." + bytes([0xff, 0xfe, 0xc3, 0x28]) * 20),
               ("non_utf8_token", "kyc1.é☃".encode() * 10),
               ("forged_token", b"kyc1." + b"A" * 400),
               ("huge_token", b"kyc1." + b"A" * (1 << 20)),
               ("huge_token", b"kyc1." + rng.bytes(4 << 20))]
    for kind, token in tokens:
        cases.append(Case(kind, "kyc_ensemble", (Step((
            encoded("DOCUMENT_IMAGE", document), encoded("SELFIE_IMAGE", selfie),
            encoded("LIVENESS_TOKEN", token)), TOKEN_INVALID),)))

    # liveness_sequence: broken frames inside a session (each refused, the session
    # goes on), and the sequence protocol misused
    frame = IMAGE_INPUT["liveness_sequence"]
    start = Step((encoded(frame, b""),), "OK", (True, False))
    end = Step((encoded(frame, b""),), "NOT_LIVE", (False, True))
    bad_frames = [(k, d) for k, d, e in images if e == INVALID and k != "zero_length"]
    for first in range(0, len(bad_frames), 10):
        chunk = bad_frames[first:first + 10]
        steps = [start] + [Step((encoded(frame, d),), INVALID, (False, False))
                           for _, d in chunk] + [end]
        cases.append(Case("bad_frames_in_a_session", "liveness_sequence", tuple(steps)))
    cases.append(Case("oversized", "liveness_sequence", (start, Step((encoded(
        frame, b"\xff\xd8\xff\xe0" + bytes(max_bytes["liveness_sequence"] - 3)),), INVALID,
        (False, False)), end)))
    frame_step = Step((encoded(frame, filler),), INVALID, (False, False))
    for _ in range(3):
        cases += [
            Case("sequence_no_start", "liveness_sequence", (frame_step,)),
            Case("sequence_unknown_id_end", "liveness_sequence",
                 (Step((encoded(frame, b""),), INVALID, (False, True)),)),
            Case("sequence_end_twice", "liveness_sequence",
                 (start, end, Step((encoded(frame, b""),), INVALID, (False, True)))),
            Case("sequence_frame_after_end", "liveness_sequence", (start, end, frame_step)),
        ]
    cases.append(Case("sequence_zero_id", "liveness_sequence",
                      (Step((encoded(frame, b""),), INVALID, (True, False)),), sequence_id=0))
    for kind, tensor in wrong_tensors(frame):
        cases.append(Case(kind, "liveness_sequence", (start, Step((tensor,), INVALID,
                                                                  (False, False)), end)))
    return cases


def requests(case_list: list[Case]) -> int:
    """How many requests a list of cases sends."""
    return sum(len(c.steps) for c in case_list)
