"""A TFLite flatbuffer -> ONNX, for the few operators MediaPipe's face landmark model uses.

``face_landmark.tflite`` (MediaPipe 0.10.14, Apache-2.0) is a small convolutional net
with float16 weights: DEQUANTIZE (float16 -> float32, folded here into float32
constants), CONV_2D, DEPTHWISE_CONV_2D, PRELU, ADD, MAX_POOL_2D and PAD. The graph is
NHWC; ONNX's Conv and MaxPool are NCHW, so the input is transposed once and every
tensor inside stays NCHW. TFLite's SAME padding puts the odd pixel after, as ONNX's
SAME_UPPER does.

Why not tflite2onnx (0.4.1, PyPI): it fails on this model (its float16 DEQUANTIZE
handling); tf2onnx needs TensorFlow. Measured once against Google's own interpreter
(ai-edge-litert 2.3.0) on real frames: landmarks within 1.5e-4 pixel.

The flatbuffer is read with ``tflite`` (TensorFlow's schema bindings, Apache-2.0).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import tflite
from onnx import TensorProto, helper, numpy_helper

from .errors import ConversionError

_DTYPES = {0: np.float32, 1: np.float16, 2: np.int32, 4: np.int64}
_SAME = 0  # tflite.Padding.SAME


class _Graph:
    """The ONNX nodes and constants of one TFLite subgraph, NCHW inside."""

    def __init__(self, model: tflite.Model) -> None:
        self.model = model
        self.sub = model.Subgraphs(0)
        self.nodes: list[onnx.NodeProto] = []
        self.constants: list[onnx.TensorProto] = []
        self.folded: dict[int, np.ndarray] = {}  # DEQUANTIZE outputs, as float32

    def name(self, index: int) -> str:
        return self.sub.Tensors(index).Name().decode()

    def array(self, index: int) -> np.ndarray | None:
        """The constant behind tensor ``index`` (float32 when folded), None if computed."""
        if index in self.folded:
            return self.folded[index]
        tensor = self.sub.Tensors(index)
        buffer = self.model.Buffers(tensor.Buffer())
        if buffer is None or buffer.DataLength() == 0:
            return None
        dtype = _DTYPES.get(tensor.Type())
        if dtype is None:
            raise ConversionError(f"tensor {self.name(index)}: TFLite type {tensor.Type()}")
        data = np.frombuffer(buffer.DataAsNumpy().tobytes(), dtype=dtype)
        return data.reshape(tensor.ShapeAsNumpy())

    def constant(self, name: str, value: np.ndarray) -> str:
        self.constants.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def activation(self, out: str, code: int) -> str:
        """Where the op writes so that its fused activation ends at ``out``."""
        if code == 0:
            return out
        pre = out + "_pre"
        if code == 1:
            self.nodes.append(helper.make_node("Relu", [pre], [out]))
        elif code == 3:
            self.nodes.append(
                helper.make_node(
                    "Clip",
                    [
                        pre,
                        self.constant(out + "_lo", np.float32(0)),
                        self.constant(out + "_hi", np.float32(6)),
                    ],
                    [out],
                )
            )
        else:
            raise ConversionError(f"fused activation {code} is not supported")
        return pre


def _options(op, kind):
    table = op.BuiltinOptions()
    options = kind()
    options.Init(table.Bytes, table.Pos)
    return options


def _conv(g: _Graph, op, ins: list[int], out: str, depthwise: bool) -> None:
    o = _options(op, tflite.DepthwiseConv2DOptions if depthwise else tflite.Conv2DOptions)
    weights, bias = g.array(ins[1]), g.array(ins[2])
    if weights is None or bias is None:
        raise ConversionError(f"{out}: convolution weights are not constants")
    weights = weights.astype(np.float32)
    # TFLite: [out, kh, kw, in] (depthwise: [1, kh, kw, channels]); ONNX: [out, in, kh, kw]
    w = weights.transpose(3, 0, 1, 2) if depthwise else weights.transpose(0, 3, 1, 2)
    dst = g.activation(out, o.FusedActivationFunction())
    g.nodes.append(
        helper.make_node(
            "Conv",
            [
                g.name(ins[0]),
                g.constant(out + "_w", w),
                g.constant(out + "_b", bias.astype(np.float32)),
            ],
            [dst],
            strides=[o.StrideH(), o.StrideW()],
            group=w.shape[0] if depthwise else 1,
            auto_pad="SAME_UPPER" if o.Padding() == _SAME else "VALID",
            kernel_shape=list(w.shape[2:]),
        )
    )


def _prelu(g: _Graph, op, ins: list[int], out: str) -> None:
    alpha = g.array(ins[1])
    if alpha is None:
        raise ConversionError(f"{out}: PRELU's alpha is not a constant")
    slope = alpha.astype(np.float32).reshape(-1, 1, 1)  # per channel, NCHW
    g.nodes.append(
        helper.make_node("PRelu", [g.name(ins[0]), g.constant(out + "_a", slope)], [out])
    )


def _add(g: _Graph, op, ins: list[int], out: str) -> None:
    o = _options(op, tflite.AddOptions)
    dst = g.activation(out, o.FusedActivationFunction())
    g.nodes.append(helper.make_node("Add", [g.name(ins[0]), g.name(ins[1])], [dst]))


def _max_pool(g: _Graph, op, ins: list[int], out: str) -> None:
    o = _options(op, tflite.Pool2DOptions)
    dst = g.activation(out, o.FusedActivationFunction())
    g.nodes.append(
        helper.make_node(
            "MaxPool",
            [g.name(ins[0])],
            [dst],
            kernel_shape=[o.FilterHeight(), o.FilterWidth()],
            strides=[o.StrideH(), o.StrideW()],
            auto_pad="SAME_UPPER" if o.Padding() == _SAME else "VALID",
        )
    )


def _pad(g: _Graph, op, ins: list[int], out: str) -> None:
    paddings = g.array(ins[1])
    if paddings is None:
        raise ConversionError(f"{out}: PAD's paddings are not constants")
    nchw = paddings.astype(np.int64)[[0, 3, 1, 2]]  # [4, 2] (before, after) per axis
    pads = np.concatenate([nchw[:, 0], nchw[:, 1]])
    g.nodes.append(
        helper.make_node(
            "Pad", [g.name(ins[0]), g.constant(out + "_pads", pads)], [out], mode="constant"
        )
    )


_OPS: dict[str, Callable] = {
    "CONV_2D": lambda g, op, ins, out: _conv(g, op, ins, out, depthwise=False),
    "DEPTHWISE_CONV_2D": lambda g, op, ins, out: _conv(g, op, ins, out, depthwise=True),
    "PRELU": _prelu,
    "ADD": _add,
    "MAX_POOL_2D": _max_pool,
    "PAD": _pad,
}


def _opcode(model: tflite.Model, op) -> str:
    code = model.OperatorCodes(op.OpcodeIndex())
    return tflite.opcode2name(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()))


def tflite_to_onnx(data: bytes, name: str, opset: int = 13) -> onnx.ModelProto:
    """The TFLite model ``data`` as ONNX: input and outputs NHWC float32 as TFLite has
    them, batch dimension ``N``. Raises ConversionError for anything else."""
    try:
        model = tflite.Model.GetRootAsModel(data, 0)
        g = _Graph(model)
        sub = g.sub
        if model.SubgraphsLength() != 1 or sub.InputsLength() != 1:
            raise ConversionError(f"{name}: one subgraph with one input expected")
    except ConversionError:
        raise
    except Exception as exc:  # a flatbuffer that is not one raises anything
        raise ConversionError(f"{name}: not a TFLite model ({type(exc).__name__})") from exc
    source = sub.Inputs(0)
    g.nodes.append(
        helper.make_node("Transpose", ["input_nhwc"], [g.name(source)], perm=[0, 3, 1, 2])
    )
    for i in range(sub.OperatorsLength()):
        op = sub.Operators(i)
        kind = _opcode(model, op)
        ins = [op.Inputs(j) for j in range(op.InputsLength())]
        if kind == "DEQUANTIZE":
            weights = g.array(ins[0])
            if weights is None:
                raise ConversionError(f"{name}: DEQUANTIZE of a computed tensor")
            g.folded[op.Outputs(0)] = weights.astype(np.float32)
            continue
        if kind not in _OPS:
            raise ConversionError(f"{name}: TFLite operator {kind} is not supported")
        _OPS[kind](g, op, ins, g.name(op.Outputs(0)))
    outputs = []
    for k in range(sub.OutputsLength()):
        index = sub.Outputs(k)
        nhwc = g.name(index) + "_nhwc"
        g.nodes.append(helper.make_node("Transpose", [g.name(index)], [nhwc], perm=[0, 2, 3, 1]))
        shape = ["N", *sub.Tensors(index).ShapeAsNumpy().tolist()[1:]]
        outputs.append(helper.make_tensor_value_info(nhwc, TensorProto.FLOAT, shape))
    shape = ["N", *sub.Tensors(source).ShapeAsNumpy().tolist()[1:]]
    graph = helper.make_graph(
        g.nodes,
        name,
        [helper.make_tensor_value_info("input_nhwc", TensorProto.FLOAT, shape)],
        outputs,
        g.constants,
    )
    converted = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    # the lowest IR the opset needs: Triton 2.51's onnxruntime reads up to IR 10
    converted.ir_version = helper.find_min_ir_version_for(list(converted.opset_import))
    onnx.checker.check_model(converted)
    return converted
