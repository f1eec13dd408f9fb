"""``kyc_intake`` as a step: both client images checked before the ensemble goes on.

Gather the rows of every request -> check each row's two images -> scatter: a row
whose image is bad answers its request with INVALID_ARG (``DOCUMENT_IMAGE: ...``),
the others pass their images on unchanged (``CHECKED_DOCUMENT_IMAGE``,
``CHECKED_SELFIE_IMAGE``). No model is called.

Then admission control (:mod:`kyc.intake.admission`): each request whose images pass
takes a ticket per row, passed on as ``ADMISSION`` to ``kyc_decision``, or is refused
at once with UNAVAILABLE when the server has as many customers in flight as it can
finish inside their budget. Bad images are answered before admission: they never
hold a place.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from kyc.intake import (
    ADMISSION_OUTPUT,
    IMAGE_INPUTS,
    OUTPUT_PREFIX,
    IntakeSettings,
    check_images,
)
from kyc.intake.admission import AdmissionMetrics, SharedAdmission
from kyc.pipeline.step import (
    Answer,
    Request,
    RequestError,
    StepContext,
    UnavailableError,
    batched,
    encoded_items,
)

NO_TICKET = (-1, -1)  # admission off (or outside a server)

Row = tuple[bytes, bytes]  # a row's DOCUMENT_IMAGE and SELFIE_IMAGE


def _rows(request: Request) -> list[Row]:
    document, selfie = (encoded_items(request.inputs, name) for name in IMAGE_INPUTS)
    if len(document) != len(selfie):
        raise RequestError(f"{IMAGE_INPUTS[0]} and {IMAGE_INPUTS[1]} have different batch sizes")
    return list(zip(document, selfie, strict=True))


class IntakeStep:
    def __init__(self, settings: IntakeSettings, admission: SharedAdmission | None = None,
                 metrics: AdmissionMetrics | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.admission = admission
        self.metrics = metrics or AdmissionMetrics("kyc_intake", "1", publish=False)
        self.clock = clock

    @classmethod
    def from_context(cls, context: StepContext) -> IntakeStep:
        settings = context.settings(IntakeSettings)
        admission = (SharedAdmission.for_server(settings.admission_settings)
                     if settings.admission and context.in_server else None)
        return cls(settings, admission,
                   AdmissionMetrics(context.model, context.version, context.in_server))

    def run(self, requests: Sequence[Request]) -> list[Answer]:
        answers = batched(requests, _rows, self._check, _answer)
        return [self._admit(a) if isinstance(a, dict) else a for a in answers]

    def _admit(self, outputs: dict[str, np.ndarray]) -> Answer:
        """``outputs`` with a ticket per row, or the request refused (UNAVAILABLE)."""
        rows = len(outputs[OUTPUT_PREFIX + IMAGE_INPUTS[0]])
        if self.admission is None:
            return {**outputs, ADMISSION_OUTPUT: np.array([NO_TICKET] * rows, np.int64)}
        decision = self.admission.admit(self.clock(), rows)  # the whole request or none
        self.metrics.record(decision, rows)
        if not decision.tickets:
            return UnavailableError(
                f"kyc_ensemble is at capacity ({decision.out} customers in flight): "
                "retry after a backoff of a few seconds, with jitter")
        return {**outputs,
                ADMISSION_OUTPUT: np.stack([t.as_array() for t in decision.tickets])}

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
