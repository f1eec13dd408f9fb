"""The one adapter from a step to a Triton Python-backend model.

``model_repository/<model>/1/model.py`` is one line of wiring::

    TritonPythonModel = triton_model("kyc.face.step:FacePreprocessStep")

and this module does the rest, the same for every model: read the config Triton
hands to ``initialize``, build the step with BLS callees; per ``execute`` gather
every request's inputs (and control inputs and correlation id for a sequence
model), run the step once, scatter one response per request. Nothing raises out
of ``execute``. One privacy rule for every model: a request's error says what
:mod:`kyc.pipeline.step` allows, and the log carries counts, timings and, for an
unexpected exception, its type and where it was raised, never its text.

``triton_python_backend_utils`` exists only inside a stub: it is imported when first
needed, so unit tests can put a fake in its place, and tooling can import a glue file
(:func:`served_step`) without Triton.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kyc.pipeline.modelconfig import Repository
from kyc.pipeline.step import (
    Answer,
    Arrays,
    CallError,
    Request,
    RequestError,
    StepContext,
    StepError,
    StepFactory,
    UnavailableError,
    where_raised,
)

log = logging.getLogger(__name__)


def pb_utils() -> Any:
    import triton_python_backend_utils

    return triton_python_backend_utils


def bls_infer(model: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str]) -> Arrays:
    """One BLS call to ``model``: outputs as numpy arrays in CPU memory, or :class:`CallError`.

    A failing callee does not raise inside the stub, it answers with an error:
    this helper checks it, so no step forgets to.
    """
    pb = pb_utils()
    request = pb.InferenceRequest(
        model_name=model,
        requested_output_names=list(outputs),
        inputs=[pb.Tensor(name, np.ascontiguousarray(a)) for name, a in inputs.items()],
        # On GPU the callee's outputs may live in device memory; numpy needs host memory.
        preferred_memory=pb.PreferredMemory(pb.TRITONSERVER_MEMORY_CPU, 0),
    )
    response = request.exec()
    if response.has_error():
        raise CallError(f"{model} failed: {response.error().message()}")
    arrays = {}
    for name in outputs:
        tensor = pb.get_output_tensor_by_name(response, name)
        if tensor is None:
            raise CallError(f"{model} returned no output '{name}'")
        arrays[name] = tensor.as_numpy()
    return arrays


def is_ready(model: str, version: int) -> bool:
    """Whether the server has ``model`` at ``version`` loaded and ready (the Python
    backend's model loading API; False when it cannot say)."""
    try:
        return bool(pb_utils().is_model_ready(model_name=model, model_version=str(version)))
    except Exception:  # an unknown model, or a stub without the API
        return False


def public_message(model: str, error: Exception) -> str:
    """What the client is told: the message of our own errors, the type of others."""
    if isinstance(error, (RequestError, UnavailableError, StepError)):
        return str(error)
    return f"{model} failed: {type(error).__name__}"


def error_response(model: str, error: Exception) -> Any:
    pb = pb_utils()
    code = (pb.TritonError.INVALID_ARG if isinstance(error, RequestError) else
            pb.TritonError.UNAVAILABLE if isinstance(error, UnavailableError) else
            pb.TritonError.INTERNAL)
    return pb.InferenceResponse(output_tensors=[],
                                error=pb.TritonError(public_message(model, error), code))


def log_failures(model: str, errors: Sequence[Exception]) -> None:
    """One line per distinct failure that is not the client's (a batch-wide failure
    answers every request with the same exception): its type and where it was raised."""
    counts: dict[int, list] = {}
    for error in errors:
        if not isinstance(error, (RequestError, UnavailableError)):
            counts.setdefault(id(error), [error, 0])[1] += 1
    for error, count in counts.values():
        more = f", and {count - 1} more request(s) of this batch with it" if count > 1 else ""
        log.error("%s: a request failed: %s%s%s", model, type(error).__name__,
                  where_raised(error), more)


def tensor_response(outputs: Mapping[str, np.ndarray]) -> Any:
    pb = pb_utils()
    return pb.InferenceResponse(
        output_tensors=[pb.Tensor(name, np.ascontiguousarray(a)) for name, a in outputs.items()]
    )


def input_names(config: Mapping[str, Any]) -> list[str]:
    """The config's inputs, and the control inputs of its sequence batcher."""
    names = [i["name"] for i in config.get("input", [])]
    for control in config.get("sequence_batching", {}).get("control_input", []):
        names.append(control["name"])
    return names


def request_parameters(request: Any) -> dict[str, Any]:
    """A request's parameters (the backend gives them as a JSON object); {} when it has
    none or they cannot be read (they are tags, never needed to answer)."""
    try:
        parsed = json.loads(request.parameters() or "{}")
    except (AttributeError, TypeError, ValueError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def resolve(target: str | StepFactory) -> StepFactory:
    """``"package.module:Name"`` -> the factory: ``Name.from_context`` for a step
    class, else ``Name`` itself (a function of the context)."""
    if not isinstance(target, str):
        return target
    module, _, name = target.partition(":")
    found = getattr(importlib.import_module(module), name)
    return getattr(found, "from_context", found)


class StepModel:
    """A Triton Python-backend model serving one step (see :func:`triton_model`)."""

    step_factory: str | StepFactory

    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.model = args["model_name"]
        self.names = input_names(config)
        self.sequence = "sequence_batching" in config
        model_dir = Path(args["model_repository"])  # Triton names the model's own folder
        context = StepContext(self.model, str(args.get("model_version", "")), config,
                              Repository(model_dir.parent), bls_infer, model_dir=model_dir,
                              is_ready=is_ready)
        self.step = resolve(self.step_factory)(context)

    def execute(self, requests: list) -> list:
        started = time.perf_counter()
        pb = pb_utils()
        batch = []
        for r in requests:
            inputs = {}
            for name in self.names:
                tensor = pb.get_input_tensor_by_name(r, name)
                if tensor is not None:
                    inputs[name] = tensor.as_numpy()
            batch.append(Request(inputs, r.correlation_id() if self.sequence else None,
                                 request_parameters(r)))
        try:
            answers: list[Answer] = self.step.run(batch)
        except Exception as exc:  # never raise out of execute: answer every request
            answers = [exc] * len(requests)
        responses, errors = [], []
        for answer in answers:
            if not isinstance(answer, Exception):
                try:
                    responses.append(tensor_response(answer))
                    continue
                except Exception as exc:  # this request only
                    answer = exc
            errors.append(answer)
            responses.append(error_response(self.model, answer))
        log_failures(self.model, errors)
        log.info("%s: %d requests, %d answered with an error, in %.1f ms", self.model,
                 len(requests), len(errors), (time.perf_counter() - started) * 1e3)
        return responses

    def finalize(self) -> None:
        close = getattr(self.step, "close", None)
        if close is not None:
            close()


def triton_model(target: str | StepFactory) -> type:
    """The ``TritonPythonModel`` class serving the step ``target``
    (``"package.module:StepClass"``, imported when Triton initializes the model)."""
    factory = target if isinstance(target, str) else staticmethod(target)
    return type("TritonPythonModel", (StepModel,), {"step_factory": factory})


def served_step(version_dir: Path, config) -> str | StepFactory:
    """The step a Python model's version serves: the target its glue file (``model.py``,
    or the config's ``default_model_filename``) hands to :func:`triton_model`, found by
    importing that file, never by reading its text: a ``"package.module:StepClass"``, or
    the factory itself. ``config``: the model's ``ModelConfig``. Raises what the import
    raises (a missing file, an error in it), and ``AttributeError`` when the file defines
    no ``triton_model`` class."""
    path = version_dir / (config.default_model_filename or "model.py")
    spec = importlib.util.spec_from_file_location(f"_kyc_glue_{version_dir.parent.name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TritonPythonModel.step_factory
