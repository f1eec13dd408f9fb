"""Converters on tiny synthetic stand-ins of the source models (no downloads)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from kyc_export import convert, synthetic
from kyc_export.errors import ConversionError, ParityError
from kyc_export.parity import check_parity, run, sample_images
from kyc_tools.assets.manifest import parse_manifest


def _io(model: onnx.ModelProto, which: str) -> dict[str, tuple[int, list]]:
    tensors = model.graph.input if which == "input" else model.graph.output
    return {
        t.name: (
            t.type.tensor_type.elem_type,
            [d.dim_param or d.dim_value for d in t.type.tensor_type.shape.dim],
        )
        for t in tensors
    }


# -- face_detector ------------------------------------------------------------------------


def test_face_detector_serves_uint8_nhwc_images_and_named_outputs():
    model = convert.convert_face_detector(synthetic.retinaface_weights_py())

    assert _io(model, "input") == {"IMAGES": (TensorProto.UINT8, ["N", "H", "W", 3])}
    assert _io(model, "output") == {
        "LOC": (TensorProto.FLOAT, ["N", "P", 4]),
        "SCORES": (TensorProto.FLOAT, ["N", "P"]),
        "LANDMARKS": (TensorProto.FLOAT, ["N", "P", 10]),
    }


def test_face_detector_bakes_bgr_order_and_mean_subtraction():
    original = synthetic.retinaface_model()
    converted = convert.convert_face_detector(synthetic.retinaface_weights_py(original))

    diffs = check_parity("face_detector", original, converted)

    assert max(diffs.values()) < 1e-5


def test_face_detector_scores_are_the_face_class_probability():
    original = synthetic.retinaface_model()
    converted = convert.convert_face_detector(synthetic.retinaface_weights_py(original))
    images = sample_images(1, 32, 48)
    bgr = images[..., ::-1].astype(np.float32) - np.array([104, 117, 123], np.float32)

    conf = run(original, {"input": bgr.transpose(0, 3, 1, 2).copy()})["conf"]
    scores = run(converted, {"IMAGES": images})["SCORES"]

    np.testing.assert_allclose(conf.sum(axis=-1), 1.0, atol=1e-6)  # softmaxed already
    np.testing.assert_allclose(scores, conf[..., 1], atol=1e-6)


def test_parity_check_catches_a_converter_that_forgets_the_bgr_swap(monkeypatch):
    original = synthetic.retinaface_model()
    real = convert.preprocess_nodes
    monkeypatch.setattr(
        convert, "preprocess_nodes", lambda *a, **k: real(*a, **{**k, "to_bgr": False})
    )
    wrong = convert.convert_face_detector(synthetic.retinaface_weights_py(original))

    with pytest.raises(ParityError, match="face_detector"):
        check_parity("face_detector", original, wrong)


def test_weights_py_is_parsed_not_executed():
    source = b"raise SystemExit('executed!')\nWEIGHTS = open('/etc/passwd', 'rb').read()\n"

    with pytest.raises(ConversionError, match="not a literal"):
        convert.load_retinaface(source)


def test_converter_names_the_missing_tensor_when_the_source_graph_differs():
    model = synthetic.ocr_det_model()
    model.graph.output[0].name = "something_else"

    with pytest.raises(ConversionError, match=r"ocr_det: source graph lacks \['sigmoid_0.tmp_0'\]"):
        convert.convert_ocr_det(model.SerializeToString())


# -- face_embedding -------------------------------------------------------------------------


def test_face_embedding_folds_weights_and_serves_only_the_face_input():
    model = convert.convert_face_embedding(synthetic.sface_model().SerializeToString())

    assert not [n for n in model.graph.node if n.op_type == "DequantizeLinear"]
    assert _io(model, "input") == {"FACE": (TensorProto.UINT8, ["N", 112, 112, 3])}
    assert _io(model, "output") == {"EMBEDDING": (TensorProto.FLOAT, ["N", 128])}
    # opset 21 was only needed by the blocked DequantizeLinear nodes
    assert (model.ir_version, model.opset_import[0].version) == (8, 17)


def test_face_embedding_matches_the_quantized_original_and_rows_do_not_depend_on_batch():
    original = synthetic.sface_model()
    converted = convert.convert_face_embedding(original.SerializeToString())

    diffs = check_parity("face_embedding", original, converted)

    assert diffs["EMBEDDING"] < 1e-5
    assert diffs["batch"] < 1e-6


def test_face_embedding_outputs_unit_vectors():
    converted = convert.convert_face_embedding(synthetic.sface_model().SerializeToString())

    emb = run(converted, {"FACE": sample_images(4, 112, 112)})["EMBEDDING"]

    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-6)


# -- ocr_det --------------------------------------------------------------------------------


def test_ocr_det_bakes_paddle_normalisation_in_bgr_order():
    original = synthetic.ocr_det_model()
    converted = convert.convert_ocr_det(original.SerializeToString())

    diffs = check_parity("ocr_det", original, converted)

    assert diffs["PROB_MAP"] < 1e-5 and diffs["logits"] < 1e-4


def test_ocr_det_prob_map_has_the_image_size_without_channel_dim():
    converted = convert.convert_ocr_det(synthetic.ocr_det_model().SerializeToString())

    prob = run(converted, {"IMAGES": sample_images(2, 64, 96)})["PROB_MAP"]

    assert prob.shape == (2, 64, 96)


# -- ocr_rec --------------------------------------------------------------------------------


def test_ocr_rec_bakes_normalisation_and_renames_the_output():
    original = synthetic.ocr_rec_model()
    converted, _ = convert.convert_ocr_rec(original.SerializeToString(), synthetic.en_dict_bytes())

    diffs = check_parity("ocr_rec", original, converted)

    assert diffs["PROBS"] < 1e-5
    assert _io(converted, "output") == {"PROBS": (TensorProto.FLOAT, ["N", "T", 97])}
    assert _io(converted, "input") == {"IMAGES": (TensorProto.UINT8, ["N", 48, "W", 3])}


def test_ocr_rec_replaces_the_broken_character_metadata_with_the_dictionary():
    original = synthetic.ocr_rec_model()
    converted, _ = convert.convert_ocr_rec(original.SerializeToString(), synthetic.en_dict_bytes())

    character = {p.key: p.value for p in converted.metadata_props}["character"]

    entries = character.split("\n")
    assert "html" not in character.lower()
    assert len(entries) == 96  # classes 1..96; class 0 is the CTC blank
    assert entries[:3] == ["0", "1", "2"]
    assert entries[-2:] == [" ", " "]  # en_dict's own last line, then the appended space


def test_ocr_rec_dict_txt_has_lf_line_endings_and_keeps_the_trailing_space_entry():
    _, dict_txt = convert.convert_ocr_rec(
        synthetic.ocr_rec_model().SerializeToString(), synthetic.en_dict_bytes()
    )

    text = dict_txt.decode("utf-8")
    assert "\r" not in text
    lines = text.splitlines()
    assert len(lines) == 95
    assert lines[-1] == " "


def test_ocr_rec_rejects_a_dictionary_that_does_not_fit_the_class_count():
    model = synthetic.ocr_rec_model(classes=50)

    with pytest.raises(ConversionError, match="50 classes"):
        convert.convert_ocr_rec(model.SerializeToString(), synthetic.en_dict_bytes())


def test_parse_dictionary_reads_crlf_lines_like_paddleocr():
    assert convert.parse_dictionary(b"a\r\nb\r\n \n") == ["a", "b", " "]


# -- common ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "opset"),
    [
        (lambda: convert.convert_face_detector(synthetic.retinaface_weights_py()), 11),
        (lambda: convert.convert_face_embedding(synthetic.sface_model().SerializeToString()), 17),
        (lambda: convert.convert_ocr_det(synthetic.ocr_det_model().SerializeToString()), 12),
        (
            lambda: convert.convert_ocr_rec(
                synthetic.ocr_rec_model().SerializeToString(), synthetic.en_dict_bytes()
            )[0],
            12,
        ),
    ],
)
def test_converted_models_pass_the_full_onnx_check_with_the_expected_opset(build, opset):
    model = build()

    onnx.checker.check_model(model, full_check=True)
    onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", opset)]


def test_convert_stamps_provenance_metadata():
    spec = parse_manifest(
        {
            "models": {
                "ocr_det": {
                    "license": "Apache-2.0",
                    "source": {
                        "package": "tiny-pkg",
                        "version": "1.0",
                        "kind": "wheel",
                        "filename": "tiny_pkg-1.0-py3-none-any.whl",
                        "sha256": "a" * 64,
                    },
                    "members": {"model": {"path": "tiny/det.onnx", "sha256": "b" * 64}},
                    "inputs": [],
                    "outputs": [],
                }
            }
        }
    ).model("ocr_det")

    converted = convert.convert(spec, {"model": synthetic.ocr_det_model().SerializeToString()})

    meta = {p.key: p.value for p in converted.model.metadata_props}
    assert meta["kyc.source"] == "tiny-pkg==1.0:tiny/det.onnx"
    assert meta["kyc.source_sha256"] == "b" * 64
    assert meta["kyc.archive_sha256"] == "a" * 64
    assert meta["kyc.converter_version"] == str(convert.CONVERTER_VERSION)
    assert meta["kyc.license"] == "Apache-2.0"


def test_subnormal_weights_are_flushed_to_zero_and_nothing_else_changes():
    from onnx import helper, numpy_helper

    from kyc_export.graph import flush_denormals

    tiny = np.finfo(np.float32).tiny
    weights = np.array([1.0, tiny / 4, -tiny / 1000, tiny, 0.0, -2.5], np.float32)
    ints = np.array([1, 2], np.int64)
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(weights, "c")),
         helper.make_node("Add", ["x", "w"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6])],
        [numpy_helper.from_array(weights, "w"), numpy_helper.from_array(ints, "i")])
    model = helper.make_model(graph)
    assert flush_denormals(model) == 4
    expected = np.array([1.0, 0.0, 0.0, tiny, 0.0, -2.5], np.float32)
    np.testing.assert_array_equal(numpy_helper.to_array(model.graph.initializer[0]), expected)
    np.testing.assert_array_equal(numpy_helper.to_array(model.graph.node[0].attribute[0].t),
                                  expected)
    np.testing.assert_array_equal(numpy_helper.to_array(model.graph.initializer[1]), ints)
    assert flush_denormals(model) == 0
