"""Small helpers shared by the ``TritonPythonModel`` classes (runs inside the stubs).

``triton_python_backend_utils`` exists only inside a Python-backend stub, so it
is imported when first needed; unit tests put a fake module in its place.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np


class RequestError(ValueError):
    """A request's inputs cannot be served; answered as INVALID_ARG."""


def pb_utils() -> Any:
    import triton_python_backend_utils

    return triton_python_backend_utils


def parse_model_config(args: Mapping[str, str]) -> dict:
    """The model config that Triton hands to ``initialize``."""
    return json.loads(args["model_config"])


def instance_count(config: Mapping) -> int:
    """Instances of this model on this server (1 when the config says nothing)."""
    return max(1, sum(int(g.get("count", 1)) for g in config.get("instance_group", [])))


def input_arrays(request: Any, names: Sequence[str]) -> dict[str, np.ndarray]:
    """The request's inputs among ``names``, as numpy arrays (absent ones left out)."""
    pb = pb_utils()
    arrays = {}
    for name in names:
        tensor = pb.get_input_tensor_by_name(request, name)
        if tensor is not None:
            arrays[name] = tensor.as_numpy()
    return arrays


def encoded_items(request: Any, name: str) -> list[bytes]:
    """The encoded items (images) of a TYPE_STRING input of dims [1]: one per batch row."""
    arrays = input_arrays(request, [name])
    if name not in arrays:
        raise RequestError(f"missing input '{name}'")
    array = arrays[name]
    if array.dtype != np.object_ or array.ndim != 2 or array.shape[1] != 1:
        raise RequestError(
            f"input '{name}' must be TYPE_STRING of shape [batch, 1], got {array.dtype} "
            f"{list(array.shape)}"
        )
    return [v if isinstance(v, bytes) else str(v).encode() for v in array[:, 0]]


def error_response(message: str, invalid_argument: bool = True,
                   unavailable: bool = False) -> Any:
    """A per-request error: INVALID_ARG for bad input, UNAVAILABLE for a capacity
    condition (try again later), INTERNAL otherwise."""
    pb = pb_utils()
    code = (pb.TritonError.UNAVAILABLE if unavailable else
            pb.TritonError.INVALID_ARG if invalid_argument else pb.TritonError.INTERNAL)
    return pb.InferenceResponse(output_tensors=[], error=pb.TritonError(message, code))


def tensor_response(outputs: Mapping[str, np.ndarray]) -> Any:
    pb = pb_utils()
    return pb.InferenceResponse(
        output_tensors=[pb.Tensor(name, np.ascontiguousarray(a)) for name, a in outputs.items()]
    )


class BlsError(RuntimeError):
    """A BLS call failed; the message names the callee and its error."""


def bls_infer(
    model: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str]
) -> dict[str, np.ndarray]:
    """One BLS call to ``model``: outputs as numpy arrays in CPU memory, or :class:`BlsError`.

    A failing callee does not raise inside the stub, it answers with an error:
    this helper checks it, so no caller forgets to.
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
        raise BlsError(f"{model} failed: {response.error().message()}")
    arrays = {}
    for name in outputs:
        tensor = pb.get_output_tensor_by_name(response, name)
        if tensor is None:
            raise BlsError(f"{model} returned no output '{name}'")
        arrays[name] = tensor.as_numpy()
    return arrays


def config_parameters(config: Mapping) -> dict[str, str]:
    """The config's ``parameters`` as plain strings."""
    return {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}


def gather(requests: Sequence[Any], items: Callable[[Any], list]) -> tuple[list, list]:
    """Gather the items of every request into one list, for one batched run.

    Returns (spans, flat): per request the ``range`` of its items in ``flat``, or the
    :class:`RequestError` that ``items`` raised for it (answered INVALID_ARG).
    """
    spans: list[range | RequestError] = []
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
