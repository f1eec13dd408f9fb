"""Python-based Triton backend named ``onnxruntime`` for the local CPU runtime.

``kyc serve`` copies this file to ``<backend-directory>/onnxruntime/model.py``;
configs with ``platform: "onnxruntime_onnx"`` then load unchanged. The logic is
in the installed package: :mod:`kyc.onnx_backend`.
"""

from kyc.onnx_backend import TritonPythonModel

__all__ = ["TritonPythonModel"]
