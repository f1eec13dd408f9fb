"""Publish a passive anti-spoofing model as ``face_antispoof`` and wire it into liveness.

No trained weights ship with this project (none are on any package registry): this
is the slot for YOUR MiniFASNet-style checkpoint (see ``minifasnet.py``). Publishing:

1. the model folder is made complete (config and version 1) outside the model
   repository, on the same filesystem, then renamed in: a polling server never sees
   a ``face_antispoof`` folder without its config or its version; a later publish
   adds the next version through ``kyc_tools.repo.publish`` (staged, checked, renamed);
2. then ``liveness_sequence``'s config is rewritten atomically with
   ``antispoof_model``, ``antispoof_scale`` and ``antispoof_size``: the liveness
   model reloads and calls the anti-spoofing model, already loaded, from then on.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import onnx

from kyc_tools.assets.files import replace_file
from kyc_tools.repo.check import check_model
from kyc_tools.repo.config import DataType, ModelConfig
from kyc_tools.repo.config_edit import format_config, set_string_parameter
from kyc_tools.repo.publish import PublishError, publish

from .errors import ConversionError

MODEL_NAME = "face_antispoof"
LIVENESS_MODEL = "liveness_sequence"

# What the model is and how liveness_sequence calls it: the config's header comment.
CONFIG_HEADER = """\
# Passive anti-spoofing (presentation attack detection), published by
# `kyc models antispoof publish` from a MiniFASNet-style checkpoint.
# Contract: CROP, the face box enlarged {scale} times around its centre and
# resized to {size}x{size} (RGB uint8; kyc.liveness.crop.context_crop) ->
# PROBS (softmax over the checkpoint's 3 classes) and REAL (class 1, real face).
# liveness_sequence calls it when its antispoof_model parameter names it.
"""
MAX_BATCH_SIZE = 32
MAX_QUEUE_DELAY_US = 2000


@dataclass(frozen=True)
class AntispoofPublished:
    model: str
    version: int
    path: Path
    liveness_config: Path


def model_config(name: str, size: int) -> ModelConfig:
    """``name``'s config: CROP uint8 [size, size, 3] -> PROBS fp32 [3], REAL fp32 [1],
    batched dynamically on one instance."""
    uint8, fp32 = DataType.Value("TYPE_UINT8"), DataType.Value("TYPE_FP32")
    config = ModelConfig(name=name, platform="onnxruntime_onnx", max_batch_size=MAX_BATCH_SIZE)
    config.input.add(name="CROP", data_type=uint8, dims=[size, size, 3])
    config.output.add(name="PROBS", data_type=fp32, dims=[3])
    config.output.add(name="REAL", data_type=fp32, dims=[1])
    config.instance_group.add(count=1)
    config.dynamic_batching.max_queue_delay_microseconds = MAX_QUEUE_DELAY_US
    return config


def config_text(name: str, scale: float, size: int) -> str:
    """:func:`model_config` as pbtxt (protobuf's text format), under its header comment."""
    return (CONFIG_HEADER.format(scale=f"{scale:g}", size=size)
            + format_config(model_config(name, size)))


def real_as_column(model: onnx.ModelProto) -> onnx.ModelProto:
    """REAL as [N, 1] (the config's dims [1] under max_batch_size), whatever the export
    gave ([N] or [N, 1])."""
    outputs = {o.name: o for o in model.graph.output}
    if "REAL" not in outputs or "PROBS" not in outputs:
        raise ConversionError("face_antispoof: the model needs outputs PROBS and REAL")
    if len(outputs["REAL"].type.tensor_type.shape.dim) == 2:
        return model
    from onnx import TensorProto

    from .graph import axes_node, opset_version, replace_outputs, tensor_info

    flat = "REAL_flat"
    for node in model.graph.node:
        node.output[:] = [flat if o == "REAL" else o for o in node.output]
    unsqueeze, inits = axes_node("Unsqueeze", flat, "REAL", [1], opset_version(model),
                                 "kyc_post/real_column")
    replace_outputs(model, [outputs["PROBS"],
                            tensor_info("REAL", TensorProto.FLOAT, ["N", 1])], [unsqueeze], inits)
    return model


def publish_antispoof(repository: Path, model: onnx.ModelProto, *, scale: float, size: int,
                      model_name: str = MODEL_NAME, liveness: str = LIVENESS_MODEL
                      ) -> AntispoofPublished:
    """Publish ``model`` as the next version of ``model_name`` (creating the model with
    its config when it is new), then point ``liveness``'s config at it."""
    repository = Path(repository)
    liveness_config = repository / liveness / "config.pbtxt"
    if not liveness_config.is_file():
        raise ConversionError(f"{liveness_config} not found: --repository must be the model "
                              "repository holding liveness_sequence")
    model = real_as_column(model)
    model_dir = repository / model_name
    if model_dir.exists():
        with _scratch(repository) as scratch:
            onnx.save(model, str(scratch / "model.onnx"))
            published = publish(repository, model_name, scratch)
        version, path = published.version, published.path
    else:
        version, path = 1, _create_model(repository, model_name, model, scale, size)
    text = liveness_config.read_text("utf-8")
    for key, value in (("antispoof_model", model_name), ("antispoof_scale", f"{scale:g}"),
                       ("antispoof_size", str(size))):
        text = set_string_parameter(text, key, value)
    replace_file(liveness_config, text.encode("utf-8"))
    return AntispoofPublished(model_name, version, path, liveness_config)


@contextlib.contextmanager
def _scratch(repository: Path) -> Iterator[Path]:
    """A temporary folder next to the repository (same filesystem), removed on exit."""
    path = repository.resolve().parent / f".kyc-antispoof-{secrets.token_hex(4)}"
    path.mkdir()
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _create_model(repository: Path, name: str, model: onnx.ModelProto, scale: float,
                  size: int) -> Path:
    """The complete model folder, renamed into the repository in one step."""
    with _scratch(repository) as scratch:
        folder = scratch / name
        (folder / "1").mkdir(parents=True)
        (folder / "config.pbtxt").write_text(config_text(name, scale, size), "utf-8")
        onnx.save(model, str(folder / "1" / "model.onnx"))
        _, problems = check_model(folder, root=scratch)
        if problems:
            raise PublishError(f"{name} refused: {len(problems)} problem(s)", problems)
        target = repository / name
        os.rename(folder, target)
    return target / "1"
