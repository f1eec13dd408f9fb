"""``kyc_intake`` as a step: both client images checked before the ensemble goes on.

Gather the rows of every request -> check each row's two images -> scatter: a row
whose image is bad answers its request with INVALID_ARG (``DOCUMENT_IMAGE: ...``),
the others pass their images on unchanged (``CHECKED_DOCUMENT_IMAGE``,
``CHECKED_SELFIE_IMAGE``). No model is called.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kyc.intake import IMAGE_INPUTS, OUTPUT_PREFIX, IntakeSettings, check_images
from kyc.pipeline.step import Answer, Request, RequestError, StepContext, batched, encoded_items

Row = tuple[bytes, bytes]  # a row's DOCUMENT_IMAGE and SELFIE_IMAGE


def _rows(request: Request) -> list[Row]:
    document, selfie = (encoded_items(request.inputs, name) for name in IMAGE_INPUTS)
    if len(document) != len(selfie):
        raise RequestError(f"{IMAGE_INPUTS[0]} and {IMAGE_INPUTS[1]} have different batch sizes")
    return list(zip(document, selfie, strict=True))


class IntakeStep:
    def __init__(self, settings: IntakeSettings) -> None:
        self.settings = settings

    @classmethod
    def from_context(cls, context: StepContext) -> IntakeStep:
        return cls(context.settings(IntakeSettings))

    def run(self, requests: Sequence[Request]) -> list[Answer]:
        return batched(requests, _rows, self._check, _answer)

    def _check(self, rows: list[Row]) -> list[tuple[Row, str | None]]:
        """Each row with its first problem (None: both images are usable)."""
        return [(row, check_images(tuple(zip(IMAGE_INPUTS, row, strict=True)),
                                   self.settings.limits)) for row in rows]


def _answer(mine: list[tuple[Row, str | None]]) -> Answer:
    bad = next((k for k, (_, problem) in enumerate(mine) if problem), None)
    if bad is not None:
        return RequestError(("" if len(mine) == 1 else f"row {bad}: ") + str(mine[bad][1]))
    return {OUTPUT_PREFIX + name: np.array([[row[k]] for row, _ in mine], dtype=np.object_)
            for k, name in enumerate(IMAGE_INPUTS)}
