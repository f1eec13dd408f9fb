"""Publishing a face_antispoof model and switching liveness_sequence to it (no torch)."""

from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from kyc_export.antispoof import publish_antispoof, real_as_column
from kyc_testing import SHIPPED_REPOSITORY
from kyc_tools.repo.config import model_parameters


def tiny_antispoof() -> onnx.ModelProto:
    """CROP uint8 [N,80,80,3] -> PROBS [N,3] (constant 0.2/0.7/0.1), REAL [N]."""
    nodes = [
        helper.make_node("Cast", ["CROP"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMean", ["f"], ["m"], axes=[1, 2, 3], keepdims=0),  # [N]
        helper.make_node("Unsqueeze", ["m", "one"], ["col"]),  # [N,1]
        helper.make_node("Mul", ["col", "zero"], ["z"]),
        helper.make_node("Add", ["z", "probs"], ["PROBS"]),  # [N,3]
        helper.make_node("Gather", ["PROBS", "idx"], ["REAL"], axis=1),  # [N]
    ]
    inits = [
        onnx.numpy_helper.from_array(np.array([1], np.int64), "one"),
        onnx.numpy_helper.from_array(np.zeros((1, 1), np.float32), "zero"),
        onnx.numpy_helper.from_array(np.array([[0.2, 0.7, 0.1]], np.float32), "probs"),
        onnx.numpy_helper.from_array(np.array(1, np.int64), "idx"),
    ]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("CROP", TensorProto.UINT8, ["N", 80, 80, 3])],
        [helper.make_tensor_value_info("PROBS", TensorProto.FLOAT, ["N", 3]),
         helper.make_tensor_value_info("REAL", TensorProto.FLOAT, ["N"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9  # what the installed onnxruntime reads
    return model


@pytest.fixture
def repository(tmp_path):
    root = tmp_path / "models"
    root.mkdir()
    shutil.copytree(SHIPPED_REPOSITORY / "liveness_sequence", root / "liveness_sequence",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_real_becomes_a_column_and_keeps_its_values():
    import onnxruntime as ort

    model = real_as_column(tiny_antispoof())
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    probs, real = session.run(["PROBS", "REAL"], {"CROP": np.zeros((2, 80, 80, 3), np.uint8)})
    assert real.shape == (2, 1) and np.allclose(real[:, 0], probs[:, 1])
    assert real_as_column(model) is model  # already a column: unchanged


def test_the_first_publish_creates_the_model_and_the_next_adds_a_version(repository):
    first = publish_antispoof(repository, tiny_antispoof(), scale=4.0, size=80)
    assert first.version == 1 and (repository / "face_antispoof" / "1" / "model.onnx").is_file()
    config = (repository / "face_antispoof" / "config.pbtxt").read_text()
    assert 'name: "face_antispoof"' in config and "enlarged 4 times" in config
    parameters = model_parameters(repository, "liveness_sequence")
    assert (parameters["antispoof_model"], parameters["antispoof_scale"]) == ("face_antispoof",
                                                                              "4")
    second = publish_antispoof(repository, tiny_antispoof(), scale=4.0, size=80)
    assert second.version == 2 and (repository / "face_antispoof" / "2" / "model.onnx").is_file()
    assert not [p for p in repository.parent.iterdir() if p.name.startswith(".kyc-antispoof")]


def test_publishing_without_liveness_in_the_repository_is_refused(tmp_path):
    from kyc_export.errors import ConversionError

    with pytest.raises(ConversionError, match="liveness_sequence"):
        publish_antispoof(tmp_path, tiny_antispoof(), scale=2.7, size=80)
    assert not (tmp_path / "face_antispoof").exists()
