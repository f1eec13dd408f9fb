"""A stand-in for ``triton_python_backend_utils`` to unit-test model glue without a server.

Only for glue: evidence that a model works comes from the integration tests.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable

import numpy as np


class FakeTensor:
    def __init__(self, name: str, array: np.ndarray) -> None:
        self._name, self.array = name, array

    @property
    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self.array


class FakeError:
    INVALID_ARG, INTERNAL, UNAVAILABLE = "INVALID_ARG", "INTERNAL", "UNAVAILABLE"

    def __init__(self, message: str, code: str = "INTERNAL") -> None:
        self._message, self.code = message, code

    def message(self) -> str:
        return self._message


class FakeResponse:
    def __init__(self, output_tensors=(), error: FakeError | None = None) -> None:
        self.output_tensors, self._error = list(output_tensors), error

    def error(self) -> FakeError | None:
        return self._error

    def has_error(self) -> bool:
        return self._error is not None

    def outputs(self) -> dict[str, np.ndarray]:
        return {t.name: t.as_numpy() for t in self.output_tensors}


class FakeRequest:
    """A BLS request; ``exec`` asks the module's ``models`` table for an answer."""

    def __init__(self, model_name, requested_output_names, inputs, **kwargs) -> None:
        self.model_name, self.outputs, self.inputs = model_name, requested_output_names, inputs
        self.kwargs = kwargs

    def exec(self) -> FakeResponse:
        module = sys.modules["triton_python_backend_utils"]
        module.calls.append(self)
        handler: Callable = module.models[self.model_name]
        return handler({t.name: t.as_numpy() for t in self.inputs})


def install(monkeypatch) -> types.ModuleType:
    """Put a fake ``triton_python_backend_utils`` in ``sys.modules`` for this test."""
    module = types.ModuleType("triton_python_backend_utils")
    module.Tensor = FakeTensor
    module.TritonError = FakeError
    module.InferenceResponse = FakeResponse
    module.InferenceRequest = FakeRequest
    module.PreferredMemory = lambda kind, device=0: (kind, device)
    module.TRITONSERVER_MEMORY_CPU = "CPU"
    module.get_input_tensor_by_name = lambda request, name: request.get(name)
    module.get_output_tensor_by_name = lambda response, name: next(
        (t for t in response.output_tensors if t.name == name), None
    )
    module.models = {}
    module.calls = []
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", module)
    return module


def served(repository, name: str, parameters: dict | None = None):
    """``name``'s ``TritonPythonModel``, loaded from its ``1/model.py`` in ``repository``
    as the stub loads it, and initialized with its config (``parameters`` override
    the config's). Install the fake module first."""
    import importlib.util
    import json

    from kyc.pipeline.modelconfig import config_dict, load_config

    config = config_dict(load_config(repository / name / "config.pbtxt"))
    for key, value in (parameters or {}).items():
        config.setdefault("parameters", {})[key] = {"string_value": value}
    spec = importlib.util.spec_from_file_location(f"_served_{name}",
                                                  repository / name / "1" / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.TritonPythonModel()
    model.initialize({"model_config": json.dumps(config), "model_name": name,
                      "model_version": "1", "model_repository": str(repository / name)})
    return model
