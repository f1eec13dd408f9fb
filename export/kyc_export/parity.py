"""Parity checks: a converted model against its original graph fed the original way.

Each check builds deterministic test images, runs the *original* ONNX model with
the pre-processing its own project applies (re-implemented here in numpy), runs
the converted model on the raw ``uint8`` images, and compares the served outputs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort

from .convert import PADDLE_DET_MEAN, PADDLE_DET_STD, PP_OCR_MRZ_CLASSES, RETINAFACE_MEAN_BGR
from .errors import ParityError

logger = logging.getLogger(__name__)

Outputs = dict[str, np.ndarray]

# Max abs difference allowed per compared tensor. Measured differences are far smaller
# (float32 rounding from reordered arithmetic); these bounds catch real mistakes
# such as a swapped channel order, which moves outputs by 1e-2 or more. "batch" bounds
# a batched run against one-image-at-a-time runs of the converted model.
TOLERANCES: dict[str, dict[str, float]] = {
    "face_detector": {
        "LOC": 1e-3,
        "SCORES": 1e-4,
        "LANDMARKS": 1e-3,
        "logits": 1e-3,
        "batch": 1e-4,
    },
    "face_embedding": {"EMBEDDING": 1e-4, "batch": 1e-4},
    "ocr_det": {"PROB_MAP": 1e-4, "logits": 1e-3, "batch": 1e-4},
    "ocr_rec": {"PROBS": 1e-4, "logits": 1e-3, "batch": 1e-4},
    "mrz_rec": {"PROBS": 1e-4, "batch": 1e-4},
    # MESH is in the crop's pixels (0..192)
    "face_landmarks": {"MESH": 1e-3, "PRESENCE": 1e-5, "batch": 1e-3},
}


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3  # the shipped SFace graph triggers many warnings
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def run(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> Outputs:
    """Run ``model`` on CPU. Declared inputs that no node reads are fed zeros
    (the shipped SFace graph declares 29 such inputs and onnxruntime insists on them)."""
    sess = session(model)
    used = {name for node in model.graph.node for name in node.input}
    full = dict(feeds)
    for inp in sess.get_inputs():
        if inp.name not in full and inp.name not in used:
            shape = [d if isinstance(d, int) else 1 for d in inp.shape]
            full[inp.name] = np.zeros(shape, dtype=np.float32)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, full), strict=True))


def sample_images(n: int, height: int, width: int, seed: int = 0) -> np.ndarray:
    """Deterministic RGB ``uint8`` images: smooth colour fields plus noise, shape [n,h,w,3].

    Smooth structure keeps convolutional features away from degenerate all-noise
    activations; distinct channels make an RGB/BGR mix-up visible.
    """
    rng = np.random.default_rng(seed)
    coarse = rng.uniform(0, 255, size=(n, 4, 4, 3))
    rows = np.linspace(0, 3, height)
    cols = np.linspace(0, 3, width)
    r0 = np.clip(rows.astype(int), 0, 2)
    c0 = np.clip(cols.astype(int), 0, 2)
    fr = (rows - r0)[None, :, None, None]
    fc = (cols - c0)[None, None, :, None]
    top = coarse[:, r0][:, :, c0] * (1 - fc) + coarse[:, r0][:, :, c0 + 1] * fc
    bottom = coarse[:, r0 + 1][:, :, c0] * (1 - fc) + coarse[:, r0 + 1][:, :, c0 + 1] * fc
    smooth = top * (1 - fr) + bottom * fr
    noisy = smooth + rng.normal(0, 12, size=smooth.shape)
    return np.clip(np.rint(noisy), 0, 255).astype(np.uint8)


# --------------------------------------------------------------------------- references
# Each original model is fed the way its own project feeds it (numpy re-implementation).


def _nchw(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def feeds_face_detector(images: np.ndarray) -> dict[str, np.ndarray]:
    """biubug6/Pytorch_Retinaface: BGR float minus (104, 117, 123), NCHW."""
    bgr = images[..., ::-1].astype(np.float32) - np.asarray(RETINAFACE_MEAN_BGR, np.float32)
    return {"input": _nchw(bgr)}


def served_face_detector(raw: Outputs) -> Outputs:
    return {"LOC": raw["loc"], "SCORES": raw["conf"][..., 1], "LANDMARKS": raw["landmarks"]}


def feeds_face_embedding(images: np.ndarray) -> dict[str, np.ndarray]:
    """OpenCV FaceRecognizerSF: blobFromImage(swapRB=true) of BGR = RGB 0..255 float NCHW."""
    return {"data": _nchw(images.astype(np.float32))}


def served_face_embedding(raw: Outputs) -> Outputs:
    """The raw 128-d feature, L2-normalised as OpenCV's match() does."""
    feats = raw["fc1"].astype(np.float64)
    return {"EMBEDDING": (feats / np.linalg.norm(feats, axis=1, keepdims=True)).astype(np.float32)}


def feeds_ocr_det(images: np.ndarray) -> dict[str, np.ndarray]:
    """PaddleOCR NormalizeImage on cv2's BGR image: (x / 255 - mean) / std, then NCHW."""
    bgr = images[..., ::-1].astype(np.float32)
    mean = np.asarray(PADDLE_DET_MEAN, np.float32)
    std = np.asarray(PADDLE_DET_STD, np.float32)
    return {"x": _nchw((bgr * np.float32(1.0 / 255.0) - mean) / std)}


def served_ocr_det(raw: Outputs) -> Outputs:
    return {"PROB_MAP": raw["sigmoid_0.tmp_0"][:, 0]}


def feeds_ocr_rec(images: np.ndarray) -> dict[str, np.ndarray]:
    """PaddleOCR resize_norm_img on cv2's BGR crop: x / 255, minus 0.5, over 0.5, NCHW."""
    x = _nchw(images[..., ::-1].astype(np.float32)) / 255
    x -= 0.5
    x /= 0.5
    return {"x": x}


def served_ocr_rec(raw: Outputs) -> Outputs:
    return {"PROBS": raw["softmax_2.tmp_0"]}


def served_mrz_rec(raw: Outputs) -> Outputs:
    return {"PROBS": raw["softmax_2.tmp_0"][..., list(PP_OCR_MRZ_CLASSES)]}


def feeds_face_landmarks(images: np.ndarray) -> dict[str, np.ndarray]:
    """MediaPipe's face landmark graph: RGB scaled to [0, 1], NHWC (the raw conversion of
    the TFLite model, kyc_export.tflite_onnx)."""
    return {"input_nhwc": images.astype(np.float32) / 255}


def served_face_landmarks(raw: Outputs) -> Outputs:
    by_size = {value.shape[-1]: value for value in raw.values()}
    flag = by_size[1].reshape(-1, 1).astype(np.float64)
    return {"MESH": by_size[1404].reshape(-1, 468, 3),
            "PRESENCE": (1 / (1 + np.exp(-flag))).astype(np.float32)}


# --------------------------------------------------------------------------- probes


def producer_input(model: onnx.ModelProto, output: str) -> str:
    """Name of the first input of the node that produces ``output`` (e.g. a Sigmoid's logits)."""
    for node in model.graph.node:
        if output in node.output:
            return node.input[0]
    raise ParityError(f"no node produces {output!r}")


def with_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """A copy of ``model`` that also returns the float32 internal tensors ``names``."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    have = {o.name for o in probe.graph.output}
    for name in names:
        if name not in have:
            info = onnx.helper.make_empty_tensor_value_info(name)
            info.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
            probe.graph.output.append(info)
    return probe


# --------------------------------------------------------------------------- checks


@dataclass(frozen=True)
class Case:
    """How to exercise one model. ``logits_of`` names an original output produced by a
    Sigmoid/Softmax: probabilities saturate on synthetic images (a text detector
    sees no text, so its map is all zeros), so the logits before it are compared too."""

    feeds: Callable[[np.ndarray], dict[str, np.ndarray]]
    served: Callable[[Outputs], Outputs]
    size: tuple[int, int, int]  # n, height, width of the sample images
    logits_of: str | None = None
    batch_one: bool = False  # the original graph only accepts batch 1


CASES: dict[str, Case] = {
    "face_detector": Case(feeds_face_detector, served_face_detector, (2, 128, 160), "conf"),
    "face_embedding": Case(
        feeds_face_embedding, served_face_embedding, (3, 112, 112), batch_one=True
    ),
    "ocr_det": Case(feeds_ocr_det, served_ocr_det, (2, 96, 128), "sigmoid_0.tmp_0"),
    "ocr_rec": Case(feeds_ocr_rec, served_ocr_rec, (2, 48, 160), "softmax_2.tmp_0"),
    "mrz_rec": Case(feeds_ocr_rec, served_mrz_rec, (2, 48, 160)),
    "face_landmarks": Case(feeds_face_landmarks, served_face_landmarks, (2, 192, 192)),
}


def reference_outputs(case: Case, original: onnx.ModelProto, images: np.ndarray) -> Outputs:
    """Run the original model on ``images`` pre-processed the original way."""
    probes = [producer_input(original, case.logits_of)] if case.logits_of else []
    model = with_outputs(original, probes)
    if case.batch_one:
        runs = [run(model, case.feeds(img[None])) for img in images]
        raw = {k: np.concatenate([r[k] for r in runs]) for k in runs[0]}
    else:
        raw = run(model, case.feeds(images))
    expected = case.served(raw)
    for probe in probes:
        expected["logits"] = raw[probe]
    return expected


def max_abs_diffs(name: str, expected: Outputs, actual: Outputs) -> dict[str, float]:
    diffs = {}
    for key, want in expected.items():
        got = actual[key]
        if got.shape != want.shape:
            raise ParityError(f"{name}: {key} has shape {got.shape}, the original {want.shape}")
        diffs[key] = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
    return diffs


def check_parity(
    name: str,
    original: onnx.ModelProto,
    converted: onnx.ModelProto,
    tolerances: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Compare ``converted`` with ``original``; return the max abs diff per output.

    Keys are the served output names, ``logits`` (the tensor before the final
    Sigmoid/Softmax, when there is one) and ``batch``: the converted model run on
    the whole batch against one image at a time, since every batch dimension is
    dynamic now (SFace's was fixed to 1).

    Raises:
        ParityError: an output differs by more than its tolerance.
    """
    if name not in CASES:
        raise ParityError(f"{name}: no parity check is defined for this model")
    case = CASES[name]
    limits = tolerances if tolerances is not None else TOLERANCES[name]
    images = sample_images(*case.size, seed=len(name))
    expected = reference_outputs(case, original, images)
    probes = [producer_input(original, case.logits_of)] if case.logits_of else []
    input_name = converted.graph.input[0].name
    raw = run(with_outputs(converted, probes), {input_name: images})
    served = [k for k in expected if k != "logits"]
    actual = {k: raw[k] for k in served}
    for probe in probes:
        actual["logits"] = raw[probe]
    diffs = max_abs_diffs(name, expected, actual)
    singles = [run(converted, {input_name: img[None]}) for img in images]
    diffs["batch"] = max(
        float(np.max(np.abs(np.concatenate([s[k] for s in singles]) - actual[k]))) for k in served
    )
    _enforce(name, diffs, limits)
    return diffs


def _enforce(name: str, diffs: Mapping[str, float], limits: Mapping[str, float]) -> None:
    bad = {k: v for k, v in diffs.items() if not v <= limits.get(k, 0.0)}
    if bad:
        detail = ", ".join(
            f"{k} max|diff| {v:.3g} > {limits.get(k, 0.0):.3g}" for k, v in bad.items()
        )
        raise ParityError(f"{name}: converted model differs from the original: {detail}")
    logger.debug("%s parity: %s", name, diffs)
