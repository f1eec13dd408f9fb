"""Reading Triton model configs (``config.pbtxt``) with Triton's own protobuf schema."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# One parser for serving and tooling: kyc.pipeline.modelconfig's.
from kyc.pipeline.modelconfig import (
    ConfigError,
    Repository,
    load_config,
    model_config_pb2,
    parse_config,
)

ModelConfig = model_config_pb2().ModelConfig
DataType = model_config_pb2().DataType

__all__ = ["ConfigError", "DataType", "ModelConfig", "ModelKind", "load_config", "model_kind",
           "model_parameters", "parse_config", "type_name"]


def model_parameters(repository: Path, model: str) -> dict[str, str]:
    """A model's string ``parameters``, from its config in ``repository`` (how one
    model reads another's settings: one source of truth)."""
    return Repository(repository).parameters(model)


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
