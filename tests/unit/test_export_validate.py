"""validate(): an ONNX model against its Triton config.pbtxt; the manifest against the repo."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2

from kyc_export.errors import ValidationError
from kyc_export.validate import validate
from kyc_tools.assets.errors import ManifestError
from kyc_tools.assets.manifest import load_manifest, parse_manifest

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"

CONFIG = """
name: "tiny"
platform: "onnxruntime_onnx"
max_batch_size: 4
input [ { name: "IMAGES" data_type: TYPE_UINT8 dims: [ -1, -1, 3 ] } ]
output [ { name: "PLANES" data_type: TYPE_FP32 dims: [ 3, -1, -1 ] } ]
"""


def _model(
    *,
    input_name: str = "IMAGES",
    input_type: int = TensorProto.UINT8,
    input_dims: tuple = ("N", "H", "W", 3),
    output_name: str = "PLANES",
    output_dims: tuple = ("N", 3, "H", "W"),
):
    """uint8 NHWC -> float NCHW, the shape of the served vision models."""
    graph = helper.make_graph(
        [
            helper.make_node("Cast", [input_name], ["f"], to=TensorProto.FLOAT),
            helper.make_node("Transpose", ["f"], [output_name], perm=[0, 3, 1, 2]),
        ],
        "tiny",
        [helper.make_tensor_value_info(input_name, input_type, list(input_dims))],
        [helper.make_tensor_value_info(output_name, TensorProto.FLOAT, list(output_dims))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "tiny" / "config.pbtxt"
    path.parent.mkdir()
    path.write_text(CONFIG)
    return path


def test_validate_accepts_a_model_that_matches_its_config(config):
    validate(_model(), config)


def test_validate_rejects_an_output_name_the_config_does_not_know(config):
    with pytest.raises(ValidationError, match=r"tiny: output names differ.*\['PROBS'\]"):
        validate(_model(output_name="PROBS"), config)


def test_validate_rejects_an_input_dtype_mismatch(config):
    with pytest.raises(ValidationError, match="tiny: input IMAGES: config says TYPE_UINT8, ONNX"):
        validate(_model(input_type=TensorProto.FLOAT), config)


def test_validate_rejects_a_fixed_dim_that_differs(config):
    with pytest.raises(ValidationError, match="tiny: input IMAGES: dim 2 is 4 in ONNX but 3"):
        validate(_model(input_dims=("N", "H", "W", 4), output_dims=("N", 4, "H", "W")), config)


def test_validate_rejects_a_fixed_onnx_dim_where_the_config_promises_any_size(config):
    with pytest.raises(ValidationError, match="dim 0 is 64 in ONNX but -1 in config"):
        validate(_model(input_dims=("N", 64, "W", 3)), config)


def test_validate_rejects_a_static_batch_dim_when_the_config_batches(config):
    with pytest.raises(ValidationError, match="needs a dynamic first dim"):
        validate(_model(input_dims=(1, "H", "W", 3)), config)


def test_validate_rejects_a_graph_that_fails_the_onnx_checker(config):
    with pytest.raises(ValidationError, match="tiny: ONNX checker"):
        validate(_model(output_dims=("N", 3, "HW")), config)  # Transpose output has rank 4


def test_validate_rejects_a_rank_mismatch(tmp_path):
    path = tmp_path / "tiny" / "config.pbtxt"
    path.parent.mkdir()
    path.write_text(CONFIG.replace("dims: [ 3, -1, -1 ]", "dims: [ 3, -1 ]"))
    with pytest.raises(ValidationError, match=r"config dims \[3, -1\] \(without batch\)"):
        validate(_model(), path)


def test_validate_runs_the_model_and_checks_output_shapes_against_the_config(tmp_path):
    path = tmp_path / "tiny" / "config.pbtxt"
    path.parent.mkdir()
    path.write_text(CONFIG.replace("dims: [ 3, -1, -1 ]", "dims: [ 4, -1, -1 ]"))
    loose = _model(output_dims=("N", "C", "H", "W"))  # ONNX does not say 3: only running tells

    with pytest.raises(ValidationError, match=r"tiny: output PLANES: shape \[1, 3, 64, 64\]"):
        validate(loose, path)


def test_validate_reports_an_unparseable_config(tmp_path):
    path = tmp_path / "config.pbtxt"
    path.write_text("name: tiny\ninput [ {")
    with pytest.raises(ValidationError, match="not a valid Triton model config"):
        validate(_model(), path)


@pytest.mark.parametrize("name", sorted(load_manifest().models))
def test_manifest_contract_matches_the_repository_config(name):
    spec = load_manifest().model(name)
    config = text_format.Parse(
        (REPOSITORY / name / "config.pbtxt").read_text(), model_config_pb2.ModelConfig()
    )

    def as_tuples(tensors):
        return [
            (t.name, model_config_pb2.DataType.Name(t.data_type), tuple(t.dims)) for t in tensors
        ]

    assert as_tuples(config.input) == [(t.name, t.data_type, t.dims) for t in spec.inputs]
    assert as_tuples(config.output) == [(t.name, t.data_type, t.dims) for t in spec.outputs]


def test_manifest_pins_every_archive_and_member_by_sha256():
    manifest = load_manifest()
    items = [*manifest.models.values(), *manifest.test_data.values()]
    assert {m.name for m in items} >= {"face_detector", "face_embedding", "ocr_det", "ocr_rec"}
    for item in items:
        assert len(item.source.sha256) == 64
        assert item.source.kind in ("wheel", "sdist")
        assert all(len(m.sha256) == 64 for m in item.members.values())
        assert item.license
    assert len(manifest.data("test_photos").members) == 7  # six photos and CREDITS.md


def test_manifest_rejects_a_malformed_sha256():
    raw = {
        "models": {
            "m": {
                "license": "MIT",
                "source": {
                    "package": "p",
                    "version": "1",
                    "kind": "wheel",
                    "filename": "p-1-py3-none-any.whl",
                    "sha256": "not-a-sha",
                },
                "members": {},
                "inputs": [],
                "outputs": [],
            }
        }
    }
    with pytest.raises(ValueError, match="64 lowercase hex"):
        parse_manifest(raw)
    with pytest.raises(ManifestError, match="unknown model 'nope'"):
        load_manifest().model("nope")
