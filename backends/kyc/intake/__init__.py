"""``kyc_intake``: the first step of ``kyc_ensemble`` and ``document_ocr``, which checks
the client's images before anything else of the request runs, and admits it.

Why a step of its own. Inside an ensemble, a step that fails ends the request at
once, while its sibling steps still run: in Triton 2.51 the error response then
lets the gRPC frontend reuse the request's buffers for the next call while those
steps still read them (docs/reliability.md, "A Triton defect behind kyc_intake").
A bad document failing in ``face_preprocess`` while ``document_ocr`` still held its
bytes made innocent requests batched with that step fail, and could crash the
server. So every check that ``face_preprocess`` and ``ocr_preprocess`` would make on
the client's images is made here first: byte and pixel limits on the header, then
a decode of every pixel (JPEG at 1/8 scale, the cheap way). A bad image is
answered here, naming its input, before any other step of its request starts;
the steps after it see only images that decode.

A request with both images is a ``kyc_ensemble`` customer; one with the document
alone (``SELFIE_IMAGE`` is optional) is a ``document_ocr`` read. Each entry is
admitted against its own limit (:mod:`kyc.intake.admission`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from kyc.image import MAX_PIXELS_PER_BYTE, ImageError, ImageLimits, check_image
from kyc.intake.admission import TICKET_TENSOR, AdmissionSettings
from kyc.pipeline.seal import SEAL_INPUT

IMAGE_INPUTS = ("DOCUMENT_IMAGE", "SELFIE_IMAGE")
OUTPUT_PREFIX = "CHECKED_"  # each output: its input, passed on unchanged
# the entry a request belongs to, by the images it carries
ENTRY_OF_IMAGES = {IMAGE_INPUTS: "kyc_ensemble", IMAGE_INPUTS[:1]: "document_ocr"}

ADMISSION_OUTPUT = TICKET_TENSOR  # the request's tickets, to its last step (int64 [3])
SEAL_OUTPUT = SEAL_INPUT  # each row's seal, to the steps that check it (kyc.pipeline.seal)
# kyc_ensemble's liveness token, which the seal binds (the steps pass it on untouched)
TOKEN_INPUT = "LIVENESS_TOKEN"
_ADMISSION = AdmissionSettings()


@dataclass(frozen=True)
class IntakeSettings:
    """``kyc_intake`` parameters: the strictest limits of the steps after it (a unit
    test holds them to ``face_preprocess`` and ``ocr_preprocess``), and the admission
    control of ``kyc_ensemble`` and ``document_ocr`` (:mod:`kyc.intake.admission`;
    defaults there; each entry's target latency follows its budget in ``kyc.budgets``)."""

    max_image_bytes: int = 20 * 1024 * 1024
    max_image_pixels: int = 40_000_000  # a photo's (a liveness frame has its own)
    max_pixels_per_byte: float = MAX_PIXELS_PER_BYTE  # a decompression bomb's mark
    admission: bool = _ADMISSION.enabled
    admission_ttl_s: float = _ADMISSION.ttl_s
    admission_initial_limit: float = _ADMISSION.initial_limit
    admission_min_limit: float = _ADMISSION.min_limit
    admission_max_limit: float = _ADMISSION.max_limit

    @property
    def limits(self) -> ImageLimits:
        return self.image_limits(work_max_side=0)

    def image_limits(self, work_max_side: int) -> ImageLimits:
        """These limits, for a step that works at ``work_max_side`` (0: checks only)."""
        return ImageLimits(self.max_image_bytes, self.max_image_pixels, work_max_side,
                           self.max_pixels_per_byte)

    def admission_settings(self, entry: str) -> AdmissionSettings:
        return replace(_ADMISSION, enabled=self.admission, ttl_s=self.admission_ttl_s,
                       initial_limit=self.admission_initial_limit,
                       min_limit=self.admission_min_limit,
                       max_limit=self.admission_max_limit).for_entry(entry)


def check_images(images: Sequence[tuple[str, bytes]], limits: ImageLimits) -> str | None:
    """None when every (input name, encoded image) is usable, else the first problem,
    prefixed with its input's name (no image content in it)."""
    for name, data in images:
        try:
            check_image(data, limits)
        except ImageError as exc:
            return f"{name}: {exc}"
    return None
