"""``kyc_intake`` as a step: the client's images checked before the ensemble goes on.

Gather the rows of every request -> check each row's images -> scatter: a row whose
image is bad answers its request with INVALID_ARG (``DOCUMENT_IMAGE: ...``), the
others pass their images on unchanged (``CHECKED_DOCUMENT_IMAGE``, and
``CHECKED_SELFIE_IMAGE`` when the request has a selfie). No model is called.

Then admission control (:mod:`kyc.intake.admission`): each request whose images pass
takes a ticket per row, passed on as ``ADMISSION`` to its last step, or is refused
at once with UNAVAILABLE when the server has as many of its entry's requests in
flight as it can finish inside their budget. A request with both images is a
``kyc_ensemble`` customer, one with the document alone a ``document_ocr`` read
(``ENTRY_OF_IMAGES``); each entry has its own limit. Bad images are answered before
admission: they never hold a place.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from kyc.intake import (
    ADMISSION_OUTPUT,
    ENTRY_OF_IMAGES,
    IMAGE_INPUTS,
    OUTPUT_PREFIX,
    SEAL_OUTPUT,
    TOKEN_INPUT,
    IntakeSettings,
    check_images,
)
from kyc.intake.admission import ENTRIES, AdmissionMetrics, SharedAdmission
from kyc.pipeline.contract import Contract
from kyc.pipeline.seal import Sealer, pipeline_sealer
from kyc.pipeline.step import (
    Answer,
    Request,
    RequestError,
    StepContext,
    UnavailableError,
    batched,
    encoded_items,
    text_tensor,
)
from kyc.verdict import application_ref

NO_TICKET = (-1, -1, -1)  # admission off (or outside a server)
WHAT = {"kyc_ensemble": "customers", "document_ocr": "documents"}  # an entry's rows

Row = tuple[tuple[str, bytes], ...]  # a row's images, by input name
# document_ocr's client sends its page as IMAGE: a problem names the input it sent
ALONE_DOCUMENT_NAME = "IMAGE"


def _names(request: Request) -> tuple[str, ...]:
    """The image inputs ``request`` carries: both, or the document alone."""
    return IMAGE_INPUTS if IMAGE_INPUTS[1] in request.inputs else IMAGE_INPUTS[:1]


def _rows(request: Request) -> list[Row]:
    names = _names(request)
    columns = [encoded_items(request.inputs, name) for name in names]
    if len({len(c) for c in columns}) > 1:
        raise RequestError(f"{IMAGE_INPUTS[0]} and {IMAGE_INPUTS[1]} have different batch sizes")
    return [tuple(zip(names, images, strict=True)) for images in zip(*columns, strict=True)]


class IntakeStep:
    CONTRACT = Contract(
        settings=IntakeSettings, budget="intake", inputs=IMAGE_INPUTS[:1],
        optional_inputs=frozenset((*IMAGE_INPUTS[1:], TOKEN_INPUT)),
        outputs=(*(OUTPUT_PREFIX + name for name in IMAGE_INPUTS), ADMISSION_OUTPUT, SEAL_OUTPUT))

    def __init__(self, settings: IntakeSettings,
                 admission: Mapping[str, SharedAdmission] | None = None,
                 metrics: AdmissionMetrics | None = None,
                 clock: Callable[[], float] = time.time, sealer: Sealer | None = None) -> None:
        self.settings = settings
        self.sealer = sealer  # None: no token key, the rows go unsealed
        self.admission = admission  # entry -> its shared state; None: admission off
        self.metrics = metrics or AdmissionMetrics("kyc_intake", "1", publish=False)
        self.clock = clock

    @classmethod
    def from_context(cls, context: StepContext) -> IntakeStep:
        settings = context.settings(IntakeSettings)
        admission = ({entry: SharedAdmission.for_server(settings.admission_settings(entry), entry)
                      for entry in ENTRIES}
                     if settings.admission and context.in_server else None)
        return cls(settings, admission,
                   AdmissionMetrics(context.model, context.version, context.in_server),
                   sealer=pipeline_sealer(context.environ))

    def run(self, requests: Sequence[Request]) -> list[Answer]:
        answers = batched(requests, _rows, self._check, _answer)
        return [self._admitted(r, a) if isinstance(a, dict) else a
                for r, a in zip(requests, answers, strict=True)]

    def _admitted(self, request: Request, outputs: dict[str, np.ndarray]) -> Answer:
        """``outputs`` admitted and sealed, or the request's error: a bad token tensor or
        ``kyc_application`` before admission (it takes no ticket), or shed."""
        try:
            tokens, application = _binding(request, len(outputs[OUTPUT_PREFIX + IMAGE_INPUTS[0]]))
        except RequestError as exc:
            return exc
        answer = self._admit(outputs, ENTRY_OF_IMAGES[_names(request)])
        return self._sealed(answer, tokens, application) if isinstance(answer, dict) else answer

    def _sealed(self, outputs: dict[str, np.ndarray], tokens: Sequence[bytes | None],
                application: str | None) -> dict[str, np.ndarray]:
        """``outputs`` with each row's seal (:mod:`kyc.pipeline.seal`): its ticket, now,
        its images', its token's and its application's digests, for the steps after
        this one to check."""
        now = self.clock()
        images = [outputs.get(OUTPUT_PREFIX + name) for name in IMAGE_INPUTS]
        seals = [self.sealer.seal(tuple(int(v) for v in ticket), now, images[0][row, 0],
                                  None if images[1] is None else images[1][row, 0],
                                  tokens[row], application)
                 if self.sealer is not None else ""
                 for row, ticket in enumerate(outputs[ADMISSION_OUTPUT])]
        return {**outputs, SEAL_OUTPUT: text_tensor(seals)}

    def _admit(self, outputs: dict[str, np.ndarray], entry: str) -> Answer:
        """``outputs`` with a ticket per row, or the request refused (UNAVAILABLE)."""
        rows = len(outputs[OUTPUT_PREFIX + IMAGE_INPUTS[0]])
        if self.admission is None:
            return {**outputs, ADMISSION_OUTPUT: np.array([NO_TICKET] * rows, np.int64)}
        decision = self.admission[entry].admit(self.clock(), rows)  # the whole request or none
        self.metrics.record(decision, rows, entry)
        if not decision.tickets:
            return UnavailableError(
                f"{entry} is at capacity ({decision.out} {WHAT[entry]} in flight): "
                "retry after a backoff of a few seconds, with jitter")
        return {**outputs,
                ADMISSION_OUTPUT: np.stack([t.as_array() for t in decision.tickets])}

    def _check(self, rows: list[Row]) -> list[tuple[Row, str | None]]:
        """Each row with its first problem (None: its images are usable)."""
        return [(row, check_images(row if len(row) > 1 else ((ALONE_DOCUMENT_NAME, row[0][1]),),
                                   self.settings.limits)) for row in rows]


def _binding(request: Request, rows: int) -> tuple[list[bytes | None], str | None]:
    """Each row's liveness token (None: the request sent none, as document_ocr's) and
    the request's ``kyc_application``, which the seal binds; RequestError for bad ones."""
    try:
        application = application_ref(request.parameters)
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    if TOKEN_INPUT not in request.inputs:
        return [None] * rows, application
    tokens = encoded_items(request.inputs, TOKEN_INPUT)
    if len(tokens) != rows:
        raise RequestError(f"{TOKEN_INPUT} and {IMAGE_INPUTS[0]} have different batch sizes")
    return list(tokens), application


def _answer(mine: list[tuple[Row, str | None]]) -> Answer:
    bad = next((k for k, (_, problem) in enumerate(mine) if problem), None)
    if bad is not None:
        return RequestError(("" if len(mine) == 1 else f"row {bad}: ") + str(mine[bad][1]))
    names = [name for name, _ in mine[0][0]] if mine else list(IMAGE_INPUTS[:1])
    return {OUTPUT_PREFIX + name: np.array([[row[k][1]] for row, _ in mine], dtype=np.object_)
            for k, name in enumerate(names)}
