"""Blockwise DequantizeLinear in numpy, and folding it into float weights."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from kyc_export import synthetic
from kyc_export.dequant import dequantize_linear, fold_constant_dequantize
from kyc_export.graph import fold_constant_reshapes, prune_unused
from kyc_export.parity import run


def _ort_dequantize(x, scale, zero_point, axis: int, block_size: int) -> np.ndarray:
    """Run a one-node DequantizeLinear graph (opset 21) in onnxruntime."""
    attrs = {"axis": axis}
    if block_size:
        attrs["block_size"] = block_size
    node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "dq",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(x, "x"),
            numpy_helper.from_array(scale, "s"),
            numpy_helper.from_array(zero_point, "z"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {})[0]


@pytest.mark.parametrize(
    ("shape", "axis", "block_size"),
    [
        ((8, 27), 1, 9),  # SFace depthwise 3x3 kernels: one block per output channel
        ((6, 100), 1, 64),  # partial last block
        ((128,), 0, 64),  # SFace's quantized bias
        ((4, 6, 5), 0, 3),  # 3-D, blocks along the first axis, partial
        ((4, 6, 5), -1, 2),  # negative axis
    ],
)
def test_blockwise_dequantize_matches_onnxruntime(shape, axis, block_size):
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, size=shape, dtype=np.int8)
    blocks = list(shape)
    blocks[axis] = -(-shape[axis] // block_size)
    scale = rng.uniform(0.001, 0.1, size=blocks).astype(np.float32)
    zero_point = rng.integers(-20, 20, size=blocks, dtype=np.int8)

    ours = dequantize_linear(x, scale, zero_point, axis=axis, block_size=block_size)

    expected = _ort_dequantize(x, scale, zero_point, axis, block_size)
    assert ours.dtype == np.float32
    np.testing.assert_array_equal(ours, expected)


def test_blockwise_dequantize_uses_one_scale_per_block_of_consecutive_elements():
    x = np.array([[10, 10, 10, 10, 10]], np.int8)
    scale = np.array([[1.0, 2.0, 3.0]], np.float32)
    zero_point = np.array([[0, 5, 10]], np.int8)

    y = dequantize_linear(x, scale, zero_point, axis=1, block_size=2)

    np.testing.assert_array_equal(y, [[10.0, 10.0, 10.0, 10.0, 0.0]])


def test_per_axis_and_per_tensor_dequantize_match_onnxruntime():
    rng = np.random.default_rng(2)
    x = rng.integers(-128, 128, size=(3, 4), dtype=np.int8)
    scale = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
    zp = np.array([1, -2, 3, -4], np.int8)
    np.testing.assert_array_equal(
        dequantize_linear(x, scale, zp, axis=1), _ort_dequantize(x, scale, zp, 1, 0)
    )
    one_scale, one_zp = np.array(0.5, np.float32), np.array(3, np.int8)
    np.testing.assert_array_equal(
        dequantize_linear(x, one_scale, one_zp), _ort_dequantize(x, one_scale, one_zp, 1, 0)
    )


def test_dequantize_rejects_scale_with_wrong_block_count():
    x = np.zeros((2, 10), np.int8)
    with pytest.raises(ValueError, match="blocked scale"):
        dequantize_linear(x, np.ones((2, 2), np.float32), axis=1, block_size=4)  # needs 3


def test_folding_keeps_the_quantized_models_outputs():
    model = synthetic.sface_model()
    data = np.random.default_rng(0).uniform(0, 255, (1, 3, 112, 112)).astype(np.float32)
    quantized = run(model, {"data": data})["fc1"]

    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    assert fold_constant_dequantize(folded) == 3
    fold_constant_reshapes(folded)
    prune_unused(folded)

    assert not [n for n in folded.graph.node if n.op_type == "DequantizeLinear"]
    np.testing.assert_allclose(run(folded, {"data": data})["fc1"], quantized, atol=1e-6)


def test_folded_initializers_hold_the_blockwise_dequantized_weights():
    model = synthetic.sface_model()
    reference = synthetic.sface_float_weights(model)
    fold_constant_dequantize(model)

    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for name, weights in reference.items():
        assert inits[name].dtype == np.float32
        np.testing.assert_array_equal(inits[name], weights)


def test_folding_leaves_dequantize_of_runtime_inputs_alone():
    node = helper.make_node("DequantizeLinear", ["x", "s"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.INT8, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array(0.5, np.float32), "s")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])

    assert fold_constant_dequantize(model) == 0
    assert [n.op_type for n in model.graph.node] == ["DequantizeLinear"]


def test_prune_drops_unused_declared_inputs_and_initializer_inputs():
    model = synthetic.sface_model()
    fold_constant_dequantize(model)
    fold_constant_reshapes(model)

    removed_inputs, removed_inits = prune_unused(model)

    assert removed_inputs == 2  # conv_w and fc_w: declared, never read
    assert removed_inits > 0  # quantized tensors, scales, zero points, reshape shape
    assert [i.name for i in model.graph.input] == ["data"]
