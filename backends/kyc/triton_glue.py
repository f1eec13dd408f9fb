"""Small helpers shared by the ``TritonPythonModel`` classes (runs inside the stubs).

``triton_python_backend_utils`` exists only inside a Python-backend stub, so it
is imported when first needed; unit tests put a fake module in its place.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


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


def error_response(message: str, invalid_argument: bool = True) -> Any:
    """A per-request error: INVALID_ARG for bad input, INTERNAL otherwise."""
    pb = pb_utils()
    code = pb.TritonError.INVALID_ARG if invalid_argument else pb.TritonError.INTERNAL
    return pb.InferenceResponse(output_tensors=[], error=pb.TritonError(message, code))


def tensor_response(outputs: Mapping[str, np.ndarray]) -> Any:
    pb = pb_utils()
    return pb.InferenceResponse(
        output_tensors=[pb.Tensor(name, np.ascontiguousarray(a)) for name, a in outputs.items()]
    )
