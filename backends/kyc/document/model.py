"""Triton glue of the two Python steps of the ``document_ocr`` ensemble.

``ocr_preprocess``: encoded IMAGE -> CANVAS (the image letterboxed into a square
the detector batches well) and SCALE (canvas pixels per input pixel, x and y).
``ocr_postprocess``: CANVAS + PROB_MAP (from ``ocr_det``) + SCALE -> TEXT_LINES and
DOCUMENT; the crops of all requests of an execute go to ``ocr_rec`` through BLS in
as few calls as their widths allow. Bad input answers its own request; nothing
raises out of ``execute``.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kyc.document.ocr import DocumentReader, OcrSettings, document_report
from kyc.image import ImageError, ImageLimits, decode_image, letterbox
from kyc.repo.check import version_dirs
from kyc.settings import from_parameters
from kyc.triton_glue import (
    BlsError,
    RequestError,
    bls_infer,
    config_parameters,
    encoded_items,
    error_response,
    gather,
    input_arrays,
    parse_model_config,
    tensor_response,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreprocessSettings:
    canvas_size: int = 960  # multiple of 32 (the detector's stride)
    max_image_bytes: int = 20 * 1024 * 1024
    max_image_pixels: int = 40_000_000
    work_max_side: int = 2000

    @property
    def limits(self) -> ImageLimits:
        return ImageLimits(self.max_image_bytes, self.max_image_pixels, self.work_max_side)


def prepare_page(data: bytes, settings: PreprocessSettings) -> tuple[np.ndarray, np.ndarray]:
    """(canvas, scale): the decoded image fitted into the square canvas, and canvas
    pixels per input pixel along x and y."""
    decoded = decode_image(data, settings.limits)
    canvas, box = letterbox(decoded.pixels, settings.canvas_size)
    scale = np.array([box.scale_x, box.scale_y], np.float32) / decoded.scale
    return canvas, scale


class OcrPreprocessModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = parse_model_config(args)
        self.settings = from_parameters(PreprocessSettings, config_parameters(config))
        if self.settings.canvas_size % 32:
            raise ValueError("canvas_size must be a multiple of 32")

    def execute(self, requests: list) -> list:
        responses = []
        for request in requests:  # decoding is per image; the models run batched later
            try:
                pages = [prepare_page(d, self.settings) for d in encoded_items(request, "IMAGE")]
            except (RequestError, ImageError) as exc:
                responses.append(error_response(f"IMAGE: {exc}"))
                continue
            except Exception as exc:
                log.error("ocr_preprocess: a request failed: %s", type(exc).__name__)
                responses.append(error_response(f"ocr_preprocess failed: {type(exc).__name__}",
                                                invalid_argument=False))
                continue
            responses.append(tensor_response({
                "CANVAS": np.stack([p[0] for p in pages]),
                "SCALE": np.stack([p[1] for p in pages]),
            }))
        return responses


def rec_alphabet(repository: Path, rec_model: str) -> list[str]:
    """The recogniser's classes past the blank: its dict.txt (latest version), then space."""
    versions = version_dirs(repository / rec_model)
    if not versions:
        raise FileNotFoundError(f"no version of {rec_model} in {repository}")
    lines = (versions[-1] / "dict.txt").read_text(encoding="utf-8").splitlines()
    return [*lines, " "]


class OcrPostprocessModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = parse_model_config(args)
        self.settings = from_parameters(OcrSettings, config_parameters(config))
        repository = Path(args["model_repository"]).parent
        alphabet = rec_alphabet(repository, self.settings.rec_model)
        self.reader = DocumentReader(self.settings, alphabet, self._recognise)

    def _recognise(self, batch: np.ndarray) -> np.ndarray:
        return bls_infer(self.settings.rec_model, {"IMAGES": batch}, ["PROBS"])["PROBS"]

    def execute(self, requests: list) -> list:
        started = time.perf_counter()
        spans, pages = gather(
            requests, lambda r: _pages(input_arrays(r, ["CANVAS", "PROB_MAP", "SCALE"])))
        try:
            lines = self.reader.read(pages)
        except BlsError as exc:  # ocr_rec failed: every request of the batch
            log.error("ocr_postprocess: %d requests failed: %s", len(requests), exc)
            message = f"ocr_postprocess failed: {exc}"
            return [error_response(message, invalid_argument=False) for _ in requests]
        except Exception as exc:
            # Type only: the texts being read are personal data, tracebacks may quote them.
            log.error("ocr_postprocess: %d requests failed: %s", len(requests),
                      type(exc).__name__)
            message = f"ocr_postprocess failed: {type(exc).__name__}"
            return [error_response(message, invalid_argument=False) for _ in requests]
        responses = [_safe_respond(span, lines) for span in spans]
        log.info("ocr_postprocess: %d requests, %d pages in %.1f ms", len(requests), len(pages),
                 (time.perf_counter() - started) * 1e3)
        return responses


def _pages(arrays: dict[str, np.ndarray]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    missing = {"CANVAS", "PROB_MAP", "SCALE"} - set(arrays)
    if missing:
        raise RequestError(f"missing input(s) {', '.join(sorted(missing))}")
    canvas, prob, scale = arrays["CANVAS"], arrays["PROB_MAP"], arrays["SCALE"]
    if canvas.ndim != 4 or prob.shape != canvas.shape[:3] or scale.shape != (len(canvas), 2):
        raise RequestError(f"CANVAS {list(canvas.shape)}, PROB_MAP {list(prob.shape)} and SCALE "
                           f"{list(scale.shape)} do not belong together")
    return [(canvas[i], prob[i], scale[i]) for i in range(len(canvas))]


def _safe_respond(span, lines):
    """One request's response; a failure while reporting it answers only that request."""
    try:
        return _respond(span, lines)
    except Exception as exc:
        log.error("ocr_postprocess: reporting a request failed: %s", type(exc).__name__)
        return error_response(f"ocr_postprocess failed: {type(exc).__name__}",
                              invalid_argument=False)


def _respond(span, lines):
    if isinstance(span, Exception):
        return error_response(str(span))
    text_lines = [[line.to_json() for line in lines[i]] for i in span]
    documents = [document_report(lines[i]) for i in span]
    return tensor_response({
        "TEXT_LINES": np.array([[json.dumps(t).encode()] for t in text_lines], dtype=np.object_),
        "DOCUMENT": np.array([[json.dumps(d).encode()] for d in documents], dtype=np.object_),
    })
