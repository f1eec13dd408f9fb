"""A model file served with OpenVINO on the CPU: the local backend's ``openvino`` CPU
execution accelerator (what onnxruntime's OpenVINO provider is in the NGC image).

The ONNX file is read and compiled by the ``openvino`` package at load; a run is one
synchronous infer request (a stub runs one ``execute`` at a time). Its accelerator
parameter ``precision_mode`` picks the inference precision: ``FP32`` (the default)
or ``BF16``, taken on CPUs with native BF16 (AMX, AVX512-BF16) and FP32 elsewhere, said
in the stub's log: a model is given BF16 only where it measured no loss
(docs/performance.md, "CPU runtime").
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np

from kyc.onnx_runtime.sessions import SlicedSession

if TYPE_CHECKING:
    from kyc.onnx_runtime.settings import OnnxModelSettings

log = logging.getLogger(__name__)

# precision_mode -> OpenVINO's inference precision hint
PRECISIONS = {"FP32": "f32", "BF16": "bf16"}


class GraphPort:
    """What the batch runner asks of a session's inputs and outputs: their names."""

    def __init__(self, name: str) -> None:
        self.name = name


def compile_properties(settings: OnnxModelSettings, capabilities: list[str]) -> dict:
    """OpenVINO's CPU properties for one stub among several on few cores: one stream of
    the configured threads, latency first, no pinning of threads to cores."""
    params = dict(settings.accelerator_parameters)
    precision = params.pop("precision_mode", "FP32").upper()
    if params:
        raise ValueError(f"unknown openvino accelerator parameter(s): {', '.join(params)} "
                         "(the local backend reads precision_mode)")
    if precision not in PRECISIONS:
        raise ValueError(f"openvino precision_mode {precision!r}: one of {', '.join(PRECISIONS)}")
    if precision != "FP32" and precision not in capabilities:
        log.warning("%s: precision_mode %s asked, but this CPU offers %s: FP32",
                    settings.model_file.name, precision, ", ".join(capabilities))
        precision = "FP32"
    return {"INFERENCE_PRECISION_HINT": PRECISIONS[precision],
            "INFERENCE_NUM_THREADS": settings.intra_op_threads,
            "NUM_STREAMS": 1,
            "PERFORMANCE_HINT": "LATENCY",
            "ENABLE_CPU_PINNING": False}


class OpenVinoSession(SlicedSession):
    """The ``run(output_names, feeds)`` of an onnxruntime session, by OpenVINO."""

    def __init__(self, settings: OnnxModelSettings) -> None:
        import openvino as ov

        core = ov.Core()
        capabilities = list(core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
        properties = compile_properties(settings, capabilities)
        self.compiled = core.compile_model(str(settings.model_file), "CPU", properties)
        self.request = self.compiled.create_infer_request()
        self.max_run_batch = settings.max_run_batch
        self.precision = self.compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
        self._inputs = [GraphPort(port.get_any_name()) for port in self.compiled.inputs]
        self._outputs = {port.get_any_name(): port for port in self.compiled.outputs}

    def _run(self, output_names, feeds):
        results = self.request.infer({name: np.ascontiguousarray(array)
                                      for name, array in feeds.items()})
        # infer() copies the outputs out of the request (share_outputs=False); no names:
        # every output, in the graph's order (as onnxruntime's run(None, ...))
        return [results[self._outputs[name]] for name in output_names or self._outputs]

    def get_inputs(self):
        return self._inputs

    def get_outputs(self):
        return [GraphPort(name) for name in self._outputs]
