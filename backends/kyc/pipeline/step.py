"""What a step is: the shape every Python model of the repository has.

A step is built once from a :class:`StepContext` (its config's parameters, the
repository's other configs, and a way to call other models) and then run on the
requests of one ``execute``: a list of :class:`Request` (input arrays by tensor
name) in, one :data:`Answer` per request out (output arrays by tensor name, or the
exception that request is answered with). A step batches by itself: gather every
request's items, one call to each model it needs, scatter. It knows nothing of
Triton; :mod:`kyc.pipeline.triton` serves it, :mod:`kyc.local` runs it in
process.

The exception's type chooses the request's status and what may be said:
:class:`RequestError` (INVALID_ARG) and :class:`UnavailableError` (UNAVAILABLE)
carry messages written for the client; :class:`StepError` (INTERNAL) too, e.g. its
:class:`CallError` that names a called model and its error; any other exception is
reported by its type only, because its text or traceback may quote personal data.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from kyc.pipeline.modelconfig import Repository, string_parameters
from kyc.settings import from_parameters

Arrays = dict[str, np.ndarray]
Answer = Arrays | Exception
T = TypeVar("T")
R = TypeVar("R")


class RequestError(ValueError):
    """A request's inputs cannot be served: INVALID_ARG, message for the client."""


class UnavailableError(RuntimeError):
    """A capacity condition, try again later: UNAVAILABLE, message for the client."""


class StepError(RuntimeError):
    """INTERNAL, with a message of our own that may be told (no personal data in it)."""


class CallError(StepError):
    """A called model failed: the message names the callee and its error."""


@dataclass(frozen=True)
class Request:
    """One request of a batch: its inputs (and controls) by tensor name."""

    inputs: Mapping[str, np.ndarray]
    correlation_id: Any = None  # the sequence of a sequence-batched model
    # The request's own parameters (KServe v2 "parameters": a client's tags, such as
    # liveness_sequence's kyc_client); never tensors, never required.
    parameters: Mapping[str, Any] = field(default_factory=dict)


class Step(Protocol):
    def run(self, requests: Sequence[Request]) -> list[Answer]:
        """One answer per request, in order; raising answers every request with it."""


# (model, inputs, output names) -> outputs; raises CallError. A BLS call when served.
Infer = Callable[[str, Mapping[str, np.ndarray], Sequence[str]], Arrays]
# (model, version) -> whether the server has that version loaded and ready
IsReady = Callable[[str, int], bool]


@dataclass(frozen=True)
class Callee:
    """Another model as a callable: ``callee({"IMAGES": batch})`` -> its outputs.

    A batch past the callee's ``max_batch_size`` goes in several calls of at most
    that many rows, concatenated back: the batch size is read from the callee's
    config, where it is defined, not restated by the caller.
    """

    model: str
    outputs: tuple[str, ...]
    max_batch: int
    infer: Infer = field(repr=False)

    def __call__(self, inputs: Mapping[str, np.ndarray]) -> Arrays:
        rows = len(next(iter(inputs.values())))
        if self.max_batch <= 0 or rows <= self.max_batch:
            return self.infer(self.model, inputs, self.outputs)
        parts = [self.infer(self.model, {k: v[i:i + self.max_batch] for k, v in inputs.items()},
                            self.outputs) for i in range(0, rows, self.max_batch)]
        return {name: np.concatenate([p[name] for p in parts]) for name in self.outputs}


@dataclass
class StepContext:
    """What a step is built from: its own config (the JSON form Triton hands to
    ``initialize``), the repository it is served from, and how to call a model."""

    model: str
    version: str
    config: Mapping[str, Any]
    repository: Repository
    infer: Infer
    in_server: bool = True  # False: run in another program's process (the bench)
    environ: Mapping[str, str] | None = None  # secrets' variables; None: os.environ
    model_dir: Path | None = None  # its folder; None: the repository's folder of that name
    # which model versions the server serves now; None: the newest of each, as the
    # in-process runtime loads them
    is_ready: IsReady | None = None

    @property
    def parameters(self) -> dict[str, str]:
        return string_parameters(dict(self.config))

    def settings(self, cls: type[T]) -> T:
        """The config's ``parameters`` read into the frozen dataclass ``cls``."""
        return from_parameters(cls, self.parameters)

    def model_settings(self, cls: type[T], model: str) -> T:
        """Another model's ``parameters`` read into ``cls`` (its settings, one source)."""
        return from_parameters(cls, self.repository.parameters(model))

    def callee(self, model: str, outputs: Sequence[str] | None = None) -> Callee:
        """``model`` as a callable returning ``outputs`` (default: all its outputs)."""
        names = tuple(outputs) if outputs is not None else self.repository.output_names(model)
        return Callee(model, names, self.repository.max_batch_size(model), self.infer)

    @property
    def own_dir(self) -> Path:
        return self.model_dir or self.repository.root / self.model


StepFactory = Callable[[StepContext], Step]


def encoded_items(inputs: Mapping[str, np.ndarray], name: str) -> list[bytes]:
    """The encoded items (images) of a TYPE_STRING input of dims [1]: one per batch row."""
    if name not in inputs:
        raise RequestError(f"missing input '{name}'")
    array = inputs[name]
    if array.dtype != np.object_ or array.ndim != 2 or array.shape[1] != 1:
        raise RequestError(
            f"input '{name}' must be TYPE_STRING of shape [batch, 1], got {array.dtype} "
            f"{list(array.shape)}"
        )
    return [v if isinstance(v, bytes) else str(v).encode() for v in array[:, 0]]


def require(inputs: Mapping[str, np.ndarray], names: Sequence[str]) -> None:
    """RequestError naming the inputs among ``names`` that the request lacks."""
    missing = [n for n in names if n not in inputs]
    if missing:
        raise RequestError(f"missing input(s) {', '.join(missing)}")


def gather(requests: Sequence[Request], items: Callable[[Request], list]
           ) -> tuple[list[range | Exception], list]:
    """Gather the items of every request into one list, for one batched run.

    Returns (spans, flat): per request the ``range`` of its items in ``flat``, or the
    :class:`RequestError` that ``items`` raised for it.
    """
    spans: list[range | Exception] = []
    flat: list = []
    for request in requests:
        try:
            mine = items(request)
        except RequestError as exc:
            spans.append(exc)
            continue
        spans.append(range(len(flat), len(flat) + len(mine)))
        flat += mine
    return spans, flat


def scatter(spans: Sequence[range | Exception], answer: Callable[[range], Answer]
            ) -> list[Answer]:
    """One answer per request: its gather error, or ``answer(span)``; an exception
    while answering one request answers that request only."""
    answers: list[Answer] = []
    for span in spans:
        if isinstance(span, Exception):
            answers.append(span)
            continue
        try:
            answers.append(answer(span))
        except Exception as exc:  # this request only
            answers.append(exc)
    return answers


def batched(requests: Sequence[Request], items: Callable[[Request], list],
            run: Callable[[list], Sequence], answer: Callable[[list], Answer]) -> list[Answer]:
    """Gather -> one run -> scatter: every request's ``items`` in one list, ONE
    ``run`` over it (one result per item), then ``answer`` per request from its
    results (a request whose items could not be read is answered by that error)."""
    spans, flat = gather(requests, items)
    results = run(flat)
    return scatter(spans, lambda span: answer([results[i] for i in span]))


def run_valid(items: Sequence[T | Exception], run: Callable[[list[T]], Sequence[R]]
              ) -> list[R | Exception]:
    """ONE ``run`` over the items that are not errors (one result per item), each result
    put back in its item's place and each error kept in its own: a step's second model
    call, over what its first left standing. A ``run`` that answers another number of
    results than it was given items fails the batch (:class:`StepError`): no result can
    then be paired with its item."""
    valid = [item for item in items if not isinstance(item, Exception)]
    results = list(run(valid))
    if len(results) != len(valid):
        raise StepError(f"a model call answered {len(results)} results for the "
                        f"{len(valid)} items it was given")
    found = iter(results)
    return [item if isinstance(item, Exception) else next(found) for item in items]


def text_tensor(values: Sequence[bytes | str]) -> np.ndarray:
    """A TYPE_STRING tensor of shape [len(values), 1]."""
    return np.array([[v if isinstance(v, bytes) else v.encode()] for v in values],
                    dtype=np.object_)


def where_raised(error: BaseException) -> str:
    """`` (file:line in function)`` of the innermost frame that raised ``error``: a
    place, never values; empty for an exception returned without being raised."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    return f" ({Path(last.filename).name}:{last.lineno} in {last.name})"
