"""Reading Triton model configs (``config.pbtxt``) with Triton's own protobuf schema."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

ModelConfig = model_config_pb2.ModelConfig
DataType = model_config_pb2.DataType


class ConfigError(ValueError):
    """A config file that Triton could not parse."""


def parse_config(text: str) -> ModelConfig:
    """Parse protobuf text format into a ``ModelConfig`` (raises :class:`ConfigError`)."""
    try:
        return text_format.Parse(text, ModelConfig())
    except text_format.ParseError as exc:
        raise ConfigError(str(exc)) from None


def load_config(path: Path) -> ModelConfig:
    return parse_config(path.read_text(encoding="utf-8"))


def model_parameters(repository: Path, model: str) -> dict[str, str]:
    """A model's string ``parameters``, from its config in ``repository`` (how one
    model reads another's settings: one source of truth)."""
    config = load_config(repository / model / "config.pbtxt")
    return {k: v.string_value for k, v in config.parameters.items()}


def type_name(data_type: int) -> str:
    """``TYPE_FP32`` for the enum value of FP32."""
    return DataType.Name(data_type)


@dataclass(frozen=True)
class ModelKind:
    """What serves a model, as Triton would decide it from the config."""

    name: str  # "onnx", "python", "ensemble", "tensorrt" or "other"
    model_file: str | None  # the file every version folder must hold


def model_kind(config: ModelConfig) -> ModelKind:
    default = config.default_model_filename or None
    if config.platform == "ensemble":
        return ModelKind("ensemble", None)
    if config.platform == "onnxruntime_onnx" or config.backend == "onnxruntime":
        return ModelKind("onnx", default or "model.onnx")
    if config.backend == "python":
        return ModelKind("python", default or "model.py")
    if config.platform == "tensorrt_plan" or config.backend == "tensorrt":
        return ModelKind("tensorrt", default or "model.plan")
    return ModelKind("other", default)
