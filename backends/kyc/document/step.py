"""The two Python steps of the ``document_ocr`` ensemble.

``ocr_preprocess``: encoded IMAGE -> CANVAS (the image letterboxed into a square
the detector batches well) and SCALE (canvas pixels per input pixel, x and y).
``ocr_postprocess``: CANVAS + PROB_MAP (from ``ocr_det``) + SCALE -> TEXT_LINES and
DOCUMENT; the crops of all requests go to ``ocr_rec`` in as few calls as their
widths allow. ``ocr_fields`` (kyc_ensemble) is the same step reading only what
``kyc_decision`` uses (``lines: "decision"``, kyc.document.ocr). Bad input answers its
own request; a failing ``ocr_rec`` the batch.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from kyc.document.ocr import DocumentReader, OcrSettings, TextLine, document_report
from kyc.image import ImageError, decode_image, letterbox
from kyc.intake import IntakeSettings
from kyc.intake.admission import TICKET_TENSOR, TicketReturns
from kyc.pipeline.contract import BLS, SETTINGS, Contract, Use
from kyc.pipeline.modelconfig import Repository
from kyc.pipeline.seal import (
    SEAL_INPUT,
    SEAL_MAX_AGE_S,
    Sealer,
    SealError,
    attestation_image,
    attestations,
    digest,
    pipeline_sealer,
    text_of,
)
from kyc.pipeline.step import (
    Answer,
    Request,
    RequestError,
    StepContext,
    batched,
    encoded_items,
    require,
    text_tensor,
)

log = logging.getLogger(__name__)

PAGE_INPUTS = ("CANVAS", "PROB_MAP", "SCALE")
# Under attestations (kyc.pipeline.seal): ocr_preprocess's canvas and scale, checked by
# ocr_fields (its optional input CANVAS_ATTESTATION), and what ocr_fields read of them.
CANVAS_ATTESTED, CANVAS_KIND = ("CANVAS", "SCALE"), "canvas"
DOCUMENT_ATTESTED, DOCUMENT_KIND = ("DOCUMENT", "TEXT_LINES"), "document"
CANVAS_ATTESTATION = "CANVAS_ATTESTATION"


@dataclass(frozen=True)
class PreprocessSettings:
    canvas_size: int = 960  # the canvas's longer side, a multiple of 32 (the detector's stride)
    # The shorter side: the page's, rounded up to a multiple of this (of 32; a coarser
    # step gives fewer distinct shapes, which Triton batches apart); 0: a square canvas.
    short_step: int = 0
    limits_model: str = "kyc_intake"  # the owner of the byte and pixel limits
    work_max_side: int = 2000

    def __post_init__(self) -> None:
        if self.canvas_size % 32:
            raise ValueError("canvas_size must be a multiple of 32")
        if self.short_step % 32 or self.short_step < 0:
            raise ValueError("short_step must be 0 or a multiple of 32")


def prepare_page(data: bytes, settings: PreprocessSettings,
                 client_limits: IntakeSettings | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(canvas, scale): the decoded image fitted into the canvas, and canvas pixels per
    input pixel along x and y."""
    limits = (client_limits or IntakeSettings()).image_limits(settings.work_max_side)
    decoded = decode_image(data, limits)
    canvas, box = letterbox(decoded.pixels, settings.canvas_size, settings.short_step)
    scale = np.array([box.scale_x, box.scale_y], np.float32) / decoded.scale
    return canvas, scale


@dataclass(eq=False)  # a step is itself only: compared and hashed by identity
class OcrPreprocessStep:
    CONTRACT = Contract(
        settings=PreprocessSettings, budget="ocr", inputs=("IMAGE",),
        outputs=("CANVAS", "SCALE", "ATTESTATION"), uses={"limits_model": Use(SETTINGS)})

    settings: PreprocessSettings
    client_limits: IntakeSettings  # those of settings.limits_model
    sealer: Sealer | None = None  # None: no token key, nothing attested

    @classmethod
    def from_context(cls, context: StepContext) -> OcrPreprocessStep:
        settings = context.settings(PreprocessSettings)
        return cls(settings, context.model_settings(IntakeSettings, settings.limits_model),
                   pipeline_sealer(context.environ))

    def run(self, requests: Sequence[Request]) -> list[Answer]:
        # Decoding is per image; the models run batched later.
        return [self._page(request) for request in requests]

    def _page(self, request: Request) -> Answer:
        try:
            images = encoded_items(request.inputs, "IMAGE")
            pages = [prepare_page(d, self.settings, self.client_limits) for d in images]
        except (RequestError, ImageError) as exc:
            return RequestError(f"IMAGE: {exc}")
        except Exception as exc:  # this request only
            return exc
        out = {"CANVAS": _stacked([p[0] for p in pages]), "SCALE": np.stack([p[1] for p in pages])}
        return {**out, "ATTESTATION": attestations(self.sealer, CANVAS_KIND,
                                                   [digest(d) for d in images], out,
                                                   CANVAS_ATTESTED)}


def _stacked(canvases: list[np.ndarray]) -> np.ndarray:
    """The rows of one request in one tensor: page-shaped canvases padded (black, at the
    bottom and right, where the pages already have their padding) to the largest."""
    height = max(c.shape[0] for c in canvases)
    width = max(c.shape[1] for c in canvases)
    out = np.zeros((len(canvases), height, width, 3), np.uint8)
    for row, canvas in enumerate(canvases):
        out[row, : canvas.shape[0], : canvas.shape[1]] = canvas
    return out


def rec_alphabet(repository: Repository, rec_model: str) -> list[str]:
    """The recogniser's classes past the blank: its dict.txt (latest version), then space."""
    lines = (repository.latest_version(rec_model) / "dict.txt").read_text(
        encoding="utf-8").splitlines()
    return [*lines, " "]


def _reading(context: StepContext, model: str):
    """A recogniser: a batch of crops -> ``model``'s PROBS (a BLS call when served)."""
    callee = context.callee(model, ["PROBS"])
    return lambda batch: callee({"IMAGES": batch})["PROBS"]


def _pages(request: Request) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    require(request.inputs, PAGE_INPUTS)
    canvas, prob, scale = (request.inputs[n] for n in PAGE_INPUTS)
    if canvas.ndim != 4 or prob.shape != canvas.shape[:3] or scale.shape != (len(canvas), 2):
        raise RequestError(f"CANVAS {list(canvas.shape)}, PROB_MAP {list(prob.shape)} and SCALE "
                           f"{list(scale.shape)} do not belong together")
    return [(canvas[i], prob[i], scale[i]) for i in range(len(canvas))]


def _answer(read: Sequence[list[TextLine]]) -> dict[str, np.ndarray]:
    return {"TEXT_LINES": text_tensor([json.dumps([line.to_json() for line in lines])
                                       for lines in read]),
            "DOCUMENT": text_tensor([json.dumps(document_report(lines)) for lines in read])}


def _proven_read(answer: Answer | None, row: int, document: str) -> bool:
    """Whether row ``row`` of ``answer`` read text from a canvas attested for the page
    of digest ``document`` (its ATTESTATION names the image the canvas came from)."""
    if not isinstance(answer, dict):
        return False
    return (attestation_image(text_of(answer["ATTESTATION"], row)) == document
            and bool(json.loads(text_of(answer["TEXT_LINES"], row))))


class OcrPostprocessStep:
    """The last step of ``document_ocr`` (and, as ``ocr_fields``, the document step of
    ``kyc_ensemble``): the page's lines read and parsed. In ``document_ocr`` it then
    gives back the request's admission tickets (optional input ``ADMISSION``)."""

    CONTRACT = Contract(
        settings=OcrSettings, budget="ocr", inputs=PAGE_INPUTS,
        optional_inputs=frozenset({TICKET_TENSOR, SEAL_INPUT, CANVAS_ATTESTATION}),
        outputs=("TEXT_LINES", "DOCUMENT", "ATTESTATION"),
        # rec_model: also the alphabet file of its newest version; settings_model: the
        # model whose parameters are its defaults (ocr_fields reads ocr_postprocess's)
        uses={"rec_model": Use(BLS), "mrz_model": Use(BLS),
              "settings_model": Use(SETTINGS, acts_as=f"{__name__}:OcrPostprocessStep")})

    def __init__(self, reader: DocumentReader, admission: TicketReturns | None = None,
                 sealer: Sealer | None = None) -> None:
        self.reader = reader
        self.admission = admission
        self.sealer = sealer  # None: no token key, nothing attested

    @classmethod
    def from_context(cls, context: StepContext) -> OcrPostprocessStep:
        settings = context.settings(OcrSettings)
        if settings.settings_model:  # its parameters, over those of the model it names
            base = context.model_settings(OcrSettings, settings.settings_model)
            settings = replace(base, **{k: getattr(settings, k) for k in context.parameters
                                        if k in OcrSettings.__dataclass_fields__})
        alphabet = rec_alphabet(context.repository, settings.rec_model)
        read, read_mrz = (_reading(context, model) if model else None
                          for model in (settings.rec_model, settings.mrz_model))
        return cls(DocumentReader(settings, alphabet, read, read_mrz),
                   TicketReturns() if context.in_server else None,
                   pipeline_sealer(context.environ))

    def run(self, requests: Sequence[Request]) -> list[Answer]:
        answers: list[Answer] = []
        try:
            answers = batched(requests, self._pages, self._read, self._answer)
            return answers
        finally:  # after the reading, most of a document's time
            if self.admission is not None:
                now = time.time()
                self.admission.give_back(
                    [row for r, a in itertools.zip_longest(requests, answers)
                     for row in self._returned(r, a, now)], now)

    def _returned(self, request: Request, answer: Answer | None,
                  now: float) -> list[tuple[np.ndarray, bool]]:
        """The rows of ``request``'s ticket under a seal of kyc_intake (a forged one is
        not given back: it would free another request's place), each with whether it
        teaches the admission limit: its page was read from a canvas ocr_preprocess
        attested for the sealed page, and text was found (kyc.intake.admission)."""
        if self.sealer is None or TICKET_TENSOR not in request.inputs:
            return []
        tickets = np.asarray(request.inputs[TICKET_TENSOR]).reshape(-1, 3)
        seals = request.inputs.get(SEAL_INPUT, np.array([[b""]] * len(tickets)))
        returned = []
        for row, ticket in enumerate(tickets):
            try:
                seal = self.sealer.open_seal(text_of(seals, row), tuple(ticket), now,
                                             SEAL_MAX_AGE_S)
            except (SealError, ValueError, IndexError):
                continue
            returned.append((ticket, _proven_read(answer, row, seal.document)))
        return returned

    def _pages(self, request: Request) -> list[tuple[tuple, str | None]]:
        """Each page of ``request`` with the digest of the image its canvas attestation
        names (None: the request has none; or none was made, as where no step holds a
        key: the in-process runtime without a token key)."""
        pages = _pages(request)
        attestations = request.inputs.get(CANVAS_ATTESTATION)
        if attestations is None or (self.sealer is None and not any(
                text_of(attestations, row) for row in range(len(attestations)))):
            return [(page, None) for page in pages]
        if self.sealer is None:
            raise RequestError(f"{CANVAS_ATTESTATION}: this server holds no key to check it")
        try:
            return [(page, self.sealer.attested_image(
                        CANVAS_KIND, text_of(attestations, row),
                        dict(zip(CANVAS_ATTESTED, (page[0], page[2]), strict=True))))
                    for row, page in enumerate(pages)]
        except (SealError, IndexError) as exc:
            raise RequestError(f"{CANVAS_ATTESTATION}: {exc}") from None

    def _read(self, pages: list[tuple[tuple, str | None]]) -> list:
        return list(zip(self.reader.read([page for page, _ in pages]),
                        [image for _, image in pages], strict=True))

    def _answer(self, mine: list) -> Answer:
        """The lines read; attested when the canvas was (ocr_fields in kyc_ensemble)."""
        out = _answer([lines for lines, _ in mine])
        return {**out, "ATTESTATION": attestations(self.sealer, DOCUMENT_KIND,
                                                   [image for _, image in mine], out,
                                                   DOCUMENT_ATTESTED)}
