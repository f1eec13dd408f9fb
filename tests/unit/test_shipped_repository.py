"""Invariants of the shipped model_repository/ (after `make setup` fetched the weights)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kyc_testing import SHIPPED_REPOSITORY, require_weights
from kyc_tools.assets.manifest import load_manifest
from kyc_tools.cli import main
from kyc_tools.repo.check import check_repository
from kyc_tools.repo.config import load_config, model_kind, type_name

CONFIGS = sorted(SHIPPED_REPOSITORY.glob("*/config.pbtxt"))
# ONNX models made from fetched weights (the manifest's models); antifraud, trained
# here, is checked on its own below.
ONNX_CONFIGS = [p for p in CONFIGS if model_kind(load_config(p)).name == "onnx"
                and p.parent.name in load_manifest().models]


def ids(paths: list[Path]) -> list[str]:
    return [p.parent.name for p in paths]


def test_kyc_repo_check_passes_on_the_shipped_repository(capsys):
    require_weights()
    assert check_repository(SHIPPED_REPOSITORY) == []
    assert main(["repo", "check", str(SHIPPED_REPOSITORY)]) == 0
    assert capsys.readouterr().out.startswith("OK: ")


@pytest.mark.parametrize("config_path", CONFIGS, ids=ids(CONFIGS))
def test_every_model_batches_at_least_8_with_dynamic_batching(config_path):
    """Ensembles have no scheduler of their own: their steps batch."""
    config = load_config(config_path)
    assert config.max_batch_size >= 8
    if config.platform != "ensemble":
        assert config.HasField("dynamic_batching") or config.HasField("sequence_batching")


@pytest.mark.parametrize("config_path", ONNX_CONFIGS, ids=ids(ONNX_CONFIGS))
def test_onnx_models_leave_the_instance_kind_to_the_server(config_path):
    """KIND_GPU fails on CPU machines; left out, Triton picks GPU where there is one."""
    assert "kind:" not in config_path.read_text()
    assert all(group.kind == 0 for group in load_config(config_path).instance_group)  # AUTO


@pytest.mark.parametrize("config_path", ONNX_CONFIGS, ids=ids(ONNX_CONFIGS))
def test_onnx_models_ask_for_tensorrt_fp16_on_gpu_with_a_cached_engine(config_path):
    accelerators = load_config(config_path).optimization.execution_accelerators
    (trt,) = [a for a in accelerators.gpu_execution_accelerator if a.name == "tensorrt"]
    assert trt.parameters["precision_mode"] == "FP16"
    assert trt.parameters["trt_engine_cache_enable"] == "1"
    assert trt.parameters["trt_engine_cache_path"].endswith(config_path.parent.name)


@pytest.mark.parametrize("config_path", ONNX_CONFIGS, ids=ids(ONNX_CONFIGS))
def test_every_onnx_config_matches_its_manifest_contract(config_path):
    config = load_config(config_path)
    spec = load_manifest().model(config_path.parent.name)

    def contract(tensors):
        return [(t.name, type_name(t.data_type), tuple(t.dims)) for t in tensors]

    assert contract(config.input) == [(t.name, t.data_type, tuple(t.dims)) for t in spec.inputs]
    assert contract(config.output) == [(t.name, t.data_type, tuple(t.dims)) for t in spec.outputs]


def test_every_served_model_has_a_manifest_entry_with_a_license_and_pinned_sha256():
    manifest = load_manifest()
    for config_path in ONNX_CONFIGS:
        spec = manifest.model(config_path.parent.name)
        assert spec.license
        assert len(spec.source.sha256) == 64
        assert all(len(m.sha256) == 64 for m in spec.members.values())


def _config(model: str):
    return load_config(SHIPPED_REPOSITORY / model / "config.pbtxt")


def test_face_preprocess_fits_its_bls_batch_into_the_detector_and_feeds_the_embedding():
    preprocess = _config("face_preprocess")
    detector = _config("face_detector")
    parameters = {k: v.string_value for k, v in preprocess.parameters.items()}
    assert parameters["detector_model"] == "face_detector"
    assert preprocess.max_batch_size <= detector.max_batch_size  # one BLS call per execute
    (face_out,) = [t for t in preprocess.output if t.name == "FACE"]
    (face_in,) = _config("face_embedding").input
    assert (face_out.data_type, list(face_out.dims)) == (face_in.data_type, list(face_in.dims))


def test_the_face_match_threshold_lives_in_the_embedding_config():
    threshold = float(_config("face_embedding").parameters["match_threshold"].string_value)
    assert 0 < threshold < 1


def test_every_onnx_model_is_either_fetched_or_trained_here():
    onnx = {p.parent.name for p in CONFIGS if model_kind(load_config(p)).name == "onnx"}
    manifest = load_manifest()
    assert onnx == set(manifest.models) | set(manifest.trained)


def test_antifraud_takes_the_pinned_feature_vector_and_no_tensorrt():
    """A 17-input logistic regression: TensorRT would not pay for itself."""
    config = load_config(SHIPPED_REPOSITORY / "antifraud" / "config.pbtxt")
    features = load_manifest().trained["antifraud"]["features"]
    (features_input,) = config.input
    assert (features_input.name, list(features_input.dims)) == ("FEATURES", [len(features)])
    assert [o.name for o in config.output] == ["FRAUD_SCORE"]
    assert not config.optimization.execution_accelerators.gpu_execution_accelerator


def test_the_tensorrt_profiles_cover_every_shape_the_python_steps_send():
    """On GPU a shape outside the engine's profile fails the request."""
    from kyc.document.ocr import OcrSettings
    from kyc.document.step import PreprocessSettings
    from kyc.face.preprocess import FaceSettings
    from kyc.settings import from_parameters
    from kyc_tools.repo.config import model_parameters

    def max_shape(model: str) -> list[int]:
        config = load_config(SHIPPED_REPOSITORY / model / "config.pbtxt")
        (trt,) = config.optimization.execution_accelerators.gpu_execution_accelerator
        text = trt.parameters["trt_profile_max_shapes"].split(":")[1]
        return [int(v) for v in text.split("x")]

    ocr = from_parameters(OcrSettings, model_parameters(SHIPPED_REPOSITORY, "ocr_postprocess"))
    batch, height, width, _ = max_shape("ocr_rec")
    assert (batch, height) == (64, 48) and width >= ocr.rec_max_width
    assert ocr.rec_max_batch <= batch
    page = from_parameters(PreprocessSettings,
                           model_parameters(SHIPPED_REPOSITORY, "ocr_preprocess"))
    assert min(max_shape("ocr_det")[1:3]) >= page.canvas_size
    face = from_parameters(FaceSettings, model_parameters(SHIPPED_REPOSITORY, "face_preprocess"))
    assert min(max_shape("face_detector")[1:3]) >= face.detector_size
    # the face step splits its detector calls at face_detector's max_batch_size
    assert max_shape("face_detector")[0] >= _config("face_detector").max_batch_size
