"""One table of data types: Triton config names, numpy dtypes and ONNX element types."""

from __future__ import annotations

import numpy as np

# Triton config data type -> numpy dtype. TYPE_STRING travels as numpy object
# arrays of bytes.
TRITON_TO_NUMPY: dict[str, np.dtype] = {
    "TYPE_BOOL": np.dtype(np.bool_),
    "TYPE_UINT8": np.dtype(np.uint8),
    "TYPE_UINT16": np.dtype(np.uint16),
    "TYPE_UINT32": np.dtype(np.uint32),
    "TYPE_UINT64": np.dtype(np.uint64),
    "TYPE_INT8": np.dtype(np.int8),
    "TYPE_INT16": np.dtype(np.int16),
    "TYPE_INT32": np.dtype(np.int32),
    "TYPE_INT64": np.dtype(np.int64),
    "TYPE_FP16": np.dtype(np.float16),
    "TYPE_FP32": np.dtype(np.float32),
    "TYPE_FP64": np.dtype(np.float64),
    "TYPE_STRING": np.dtype(np.object_),
}

# ONNX TensorProto element type number -> Triton config data type.
ONNX_TO_TRITON: dict[int, str] = {
    1: "TYPE_FP32",
    2: "TYPE_UINT8",
    3: "TYPE_INT8",
    4: "TYPE_UINT16",
    5: "TYPE_INT16",
    6: "TYPE_INT32",
    7: "TYPE_INT64",
    8: "TYPE_STRING",
    9: "TYPE_BOOL",
    10: "TYPE_FP16",
    11: "TYPE_FP64",
    12: "TYPE_UINT32",
    13: "TYPE_UINT64",
}


def numpy_dtype(triton_type: str) -> np.dtype:
    """The numpy dtype of a Triton config data type (``TYPE_FP32`` or ``FP32``)."""
    key = triton_type if triton_type.startswith("TYPE_") else f"TYPE_{triton_type}"
    try:
        return TRITON_TO_NUMPY[key]
    except KeyError:
        raise ValueError(f"unsupported Triton data type {triton_type!r}") from None
