"""Check a converted model against its Triton ``config.pbtxt`` before it is installed.

The check is what Triton's onnxruntime backend would otherwise find at load time
(or, worse, at the first request): tensor names, data types and dims, the dynamic
batch dimension, and that the model runs at batch 1 and 2 with output shapes the
config promises.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from google.protobuf import text_format
from onnx import TensorProto, helper

from .errors import ValidationError

logger = logging.getLogger(__name__)

_TRITON_TO_ONNX = {
    "TYPE_BOOL": TensorProto.BOOL,
    "TYPE_UINT8": TensorProto.UINT8,
    "TYPE_UINT16": TensorProto.UINT16,
    "TYPE_UINT32": TensorProto.UINT32,
    "TYPE_UINT64": TensorProto.UINT64,
    "TYPE_INT8": TensorProto.INT8,
    "TYPE_INT16": TensorProto.INT16,
    "TYPE_INT32": TensorProto.INT32,
    "TYPE_INT64": TensorProto.INT64,
    "TYPE_FP16": TensorProto.FLOAT16,
    "TYPE_FP32": TensorProto.FLOAT,
    "TYPE_FP64": TensorProto.DOUBLE,
    "TYPE_BF16": TensorProto.BFLOAT16,
    "TYPE_STRING": TensorProto.STRING,
}
SAMPLE_DIM = 64  # used for every -1 dim when running the model; a multiple of 32 for OCR det


def load_config(config_path: Path):
    """Parse a ``config.pbtxt`` into tritonclient's ``ModelConfig`` message."""
    from tritonclient.grpc import model_config_pb2  # heavy import, only when validating

    path = Path(config_path)
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        raise ValidationError(f"cannot read Triton config {path}: {exc}") from exc
    try:
        return text_format.Parse(text, model_config_pb2.ModelConfig())
    except text_format.ParseError as exc:
        raise ValidationError(f"{path}: not a valid Triton model config: {exc}") from exc


def validate(model: onnx.ModelProto, config_path: Path) -> None:
    """Raise :class:`ValidationError` naming the model and the mismatch, if any."""
    config = load_config(config_path)
    name = config.name or Path(config_path).parent.name
    if config.platform not in ("", "onnxruntime_onnx") or config.backend not in ("", "onnxruntime"):
        raise ValidationError(f"{name}: config does not select the onnxruntime backend")
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise ValidationError(f"{name}: ONNX checker: {exc}") from exc
    batching = config.max_batch_size > 0
    inits = {t.name for t in model.graph.initializer}
    onnx_inputs = [i for i in model.graph.input if i.name not in inits]
    _compare(name, "input", onnx_inputs, config.input, batching)
    _compare(name, "output", list(model.graph.output), config.output, batching)
    _run_samples(name, model, config)


def _compare(
    model: str,
    kind: str,
    onnx_tensors: Sequence[onnx.ValueInfoProto],
    config_tensors,
    batching: bool,
) -> None:
    onnx_by_name = {t.name: t for t in onnx_tensors}
    config_names = [t.name for t in config_tensors]
    if sorted(onnx_by_name) != sorted(config_names):
        raise ValidationError(
            f"{model}: {kind} names differ: ONNX has {sorted(onnx_by_name)}, "
            f"config.pbtxt has {sorted(config_names)}"
        )
    for spec in config_tensors:
        _compare_tensor(model, kind, onnx_by_name[spec.name], spec, batching)


def _compare_tensor(
    model: str, kind: str, tensor: onnx.ValueInfoProto, spec, batching: bool
) -> None:
    from tritonclient.grpc import model_config_pb2

    what = f"{model}: {kind} {spec.name}"
    triton_type = model_config_pb2.DataType.Name(spec.data_type)
    want_type = _TRITON_TO_ONNX.get(triton_type)
    got_type = tensor.type.tensor_type.elem_type
    if want_type != got_type:
        raise ValidationError(
            f"{what}: config says {triton_type}, ONNX has {TensorProto.DataType.Name(got_type)}"
        )
    dims = _onnx_dims(tensor)
    if dims is None:
        raise ValidationError(f"{what}: ONNX declares no shape")
    want = list(spec.reshape.shape) if spec.HasField("reshape") else list(spec.dims)
    if batching:
        if not dims or isinstance(dims[0], int):
            raise ValidationError(
                f"{what}: max_batch_size > 0 needs a dynamic first dim, ONNX has {_fmt(dims)}"
            )
        dims = dims[1:]
    if len(dims) != len(want):
        raise ValidationError(
            f"{what}: config dims {want} (without batch) but ONNX dims {_fmt(dims)}"
        )
    for i, (got, exp) in enumerate(zip(dims, want, strict=True)):
        # A fixed ONNX dim where the config promises -1 would reject valid requests;
        # a dynamic ONNX dim where the config is fixed is fine (Triton enforces it).
        if isinstance(got, int) and got != exp:
            raise ValidationError(
                f"{what}: dim {i} is {got} in ONNX but {exp} in config "
                f"(dims {_fmt(dims)} vs {want})"
            )


def _onnx_dims(tensor: onnx.ValueInfoProto) -> list[int | str] | None:
    ttype = tensor.type.tensor_type
    if not ttype.HasField("shape"):
        return None
    return [
        d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in ttype.shape.dim
    ]


def _fmt(dims: Sequence[int | str]) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def _run_samples(name: str, model: onnx.ModelProto, config) -> None:
    """Run onnxruntime at batch 1 and 2 and compare output shapes with the config."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        sess = ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:  # onnxruntime raises several private exception types
        raise ValidationError(f"{name}: onnxruntime cannot load the model: {exc}") from exc
    batches = (
        [1, 2] if config.max_batch_size >= 2 else [1] if config.max_batch_size == 1 else [None]
    )
    rng = np.random.default_rng(0)
    for batch in batches:
        feeds = {spec.name: _sample(spec, batch, rng) for spec in config.input}
        try:
            outputs = sess.run([o.name for o in config.output], feeds)
        except Exception as exc:
            raise ValidationError(f"{name}: onnxruntime failed at batch {batch}: {exc}") from exc
        for spec, value in zip(config.output, outputs, strict=True):
            _check_output(name, spec, value, batch)
        logger.debug("%s: batch %s ran, outputs %s", name, batch, [o.shape for o in outputs])


def _sample(spec, batch: int | None, rng: np.random.Generator) -> np.ndarray:
    from tritonclient.grpc import model_config_pb2

    dims = [d if d > 0 else SAMPLE_DIM for d in spec.dims]
    shape = dims if batch is None else [batch, *dims]
    onnx_type = _TRITON_TO_ONNX[model_config_pb2.DataType.Name(spec.data_type)]
    dtype = helper.tensor_dtype_to_np_dtype(onnx_type)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, 0), min(info.max, 255), size=shape, endpoint=True).astype(
            dtype
        )
    return rng.standard_normal(shape).astype(dtype)


def _check_output(name: str, spec, value: np.ndarray, batch: int | None) -> None:
    want = list(spec.dims) if batch is None else [batch, *spec.dims]
    what = f"{name}: output {spec.name}"
    if value.ndim != len(want) or any(
        w > 0 and w != g for w, g in zip(want, value.shape, strict=False)
    ):
        raise ValidationError(
            f"{what}: shape {list(value.shape)} at batch {batch} does not fit config dims {want}"
        )
    if np.issubdtype(value.dtype, np.floating) and not np.all(np.isfinite(value)):
        raise ValidationError(f"{what}: non-finite values at batch {batch}")
