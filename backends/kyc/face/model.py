"""``face_preprocess``: the Triton glue over :class:`kyc.face.preprocess.FacePreprocessor`.

Gather every image of every request of this ``execute`` -> one preprocessor run
(one BLS call to ``face_detector``) -> scatter one response per request. A bad
image answers its own request with INVALID_ARG; a failing detector answers the
requests of this batch with INTERNAL; nothing raises out of ``execute``.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from kyc.face.preprocess import FacePreprocessor, FaceSettings, result_tensors
from kyc.image import ImageError
from kyc.settings import from_parameters
from kyc.triton_glue import (
    BlsError,
    RequestError,
    bls_infer,
    config_parameters,
    encoded_items,
    error_response,
    gather,
    parse_model_config,
    tensor_response,
)

log = logging.getLogger(__name__)

DETECTOR_OUTPUTS = ("LOC", "SCORES", "LANDMARKS")


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = parse_model_config(args)
        self.settings = from_parameters(FaceSettings, config_parameters(config))
        self.preprocessor = FacePreprocessor(self.settings, self._detect)
        log.info("%s: detector %s at %dx%d, score >= %.2f", args["model_name"],
                 self.settings.detector_model, self.settings.detector_size,
                 self.settings.detector_size, self.settings.score_threshold)

    def _detect(self, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        out = bls_infer(self.settings.detector_model, {"IMAGES": batch}, DETECTOR_OUTPUTS)
        return out["LOC"], out["SCORES"], out["LANDMARKS"]

    def execute(self, requests: list) -> list:
        started = time.perf_counter()
        spans, images = gather(requests, lambda r: encoded_items(r, "IMAGE"))
        try:
            results = self.preprocessor.run(images)
        except BlsError as exc:
            log.error("face_preprocess: %d requests failed: %s", len(requests), exc)
            return [error_response(str(exc), invalid_argument=False) for _ in requests]
        except Exception as exc:  # never raise out of execute: answer every request
            log.exception("face_preprocess: %d requests failed", len(requests))
            message = f"face_preprocess failed: {type(exc).__name__}"
            return [error_response(message, invalid_argument=False) for _ in requests]
        responses = [self._respond(span, results) for span in spans]
        log.info("face_preprocess: %d requests, %d images in %.1f ms", len(requests),
                 len(images), (time.perf_counter() - started) * 1e3)
        return responses

    @staticmethod
    def _respond(span: range | RequestError, results: list):
        if isinstance(span, RequestError):
            return error_response(str(span))
        mine = [results[i] for i in span]
        for k, result in enumerate(mine):
            if isinstance(result, Exception):
                where = "IMAGE" if len(mine) == 1 else f"IMAGE[{k}]"
                return error_response(f"{where}: {result}",
                                      invalid_argument=isinstance(result, ImageError))
        return tensor_response(result_tensors(mine))
