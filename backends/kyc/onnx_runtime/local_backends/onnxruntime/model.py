"""Python-based Triton backend named ``onnxruntime`` for the local CPU runtime.

``kyc serve`` copies this file to ``<backend-directory>/onnxruntime/model.py``;
configs with ``platform: "onnxruntime_onnx"`` then load unchanged. The step is
:class:`kyc.onnx_runtime.backend.OnnxStep`.
"""

from kyc.pipeline.triton import triton_model

TritonPythonModel = triton_model("kyc.onnx_runtime.backend:OnnxStep")
