"""``kyc_intake``: the Triton glue over :mod:`kyc.intake`.

Gather the rows of every request -> check each row's two images -> scatter: a row
whose image is bad answers its request with INVALID_ARG (``DOCUMENT_IMAGE: ...``),
the others pass their images on unchanged
(``CHECKED_DOCUMENT_IMAGE``, ``CHECKED_SELFIE_IMAGE``). No model is called.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from kyc.intake import IMAGE_INPUTS, OUTPUT_PREFIX, IntakeSettings, check_images
from kyc.settings import from_parameters
from kyc.triton_glue import (
    RequestError,
    config_parameters,
    encoded_items,
    error_response,
    gather,
    parse_model_config,
    tensor_response,
)

log = logging.getLogger(__name__)


def _rows(request) -> list[tuple[bytes, bytes]]:
    document, selfie = (encoded_items(request, name) for name in IMAGE_INPUTS)
    if len(document) != len(selfie):
        raise RequestError(f"{IMAGE_INPUTS[0]} and {IMAGE_INPUTS[1]} have different batch sizes")
    return list(zip(document, selfie, strict=True))


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = parse_model_config(args)
        self.settings = from_parameters(IntakeSettings, config_parameters(config))

    def execute(self, requests: list) -> list:
        started = time.perf_counter()
        spans, rows = gather(requests, _rows)
        problems = [check_images(tuple(zip(IMAGE_INPUTS, row, strict=True)),
                                 self.settings.limits) for row in rows]
        responses = []
        for span in spans:
            if isinstance(span, RequestError):
                responses.append(error_response(str(span)))
                continue
            mine = [problems[i] for i in span]
            bad = next((k for k, p in enumerate(mine) if p), None)
            if bad is not None:
                where = "" if len(mine) == 1 else f"row {bad}: "
                responses.append(error_response(where + mine[bad]))
                continue
            responses.append(tensor_response({
                OUTPUT_PREFIX + name: np.array([[rows[i][k]] for i in span], dtype=np.object_)
                for k, name in enumerate(IMAGE_INPUTS)}))
        log.info("kyc_intake: %d requests, %d rows, %d refused in %.1f ms", len(requests),
                 len(rows), sum(p is not None for p in problems),
                 (time.perf_counter() - started) * 1e3)
        return responses
