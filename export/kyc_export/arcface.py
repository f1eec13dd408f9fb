"""Bring your own ArcFace: a PyTorch IResNet ``state_dict`` -> ``face_embedding`` version.

:func:`load_backbone` builds the IResNet of :mod:`kyc_export.iresnet` and loads the
checkpoint strictly; :func:`export_arcface` exports it to ONNX with the served contract
of ``face_embedding`` baked in (``FACE`` uint8 ``[N,112,112,3]`` RGB -> ``(x - 127.5) /
127.5`` -> NCHW -> IResNet -> L2 norm -> ``EMBEDDING`` float32 ``[N,D]``), the same
pre/post-processing nodes as the shipped converters, and checks it against PyTorch
with onnxruntime; :func:`publish_arcface` makes it the next version of the model in a
repository and updates the config's ``EMBEDDING`` dims (and ``match_threshold``).

No weights ship with this module: the user brings the checkpoint.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import torch
import torch.nn.functional as F  # noqa: N812 - the usual torch alias
from onnx import TensorProto
from torch import nn

from kyc.face.match import MATCH_KEY as THRESHOLD_KEY
from kyc.face.match import REVIEW_KEY
from kyc.pipeline.modelconfig import served_versions, version_dirs
from kyc_tools.assets.fetch import sha256_file
from kyc_tools.assets.files import replace_file
from kyc_tools.repo.check import CONFIG, check_model, check_version
from kyc_tools.repo.config import parse_config
from kyc_tools.repo.config_edit import (
    ConfigEditError,
    set_output_dims,
    set_string_parameter,
    set_version_policy,
)
from kyc_tools.repo.publish import Published, PublishError, publish

from .convert import (
    L2_EPSILON,
    SFACE_TARGET_OPSET,
    finish_model,
    l2_normalize_nodes,
    preprocess_nodes,
)
from .errors import ConversionError, InstallError, ParityError
from .graph import opset_version, replace_input, replace_outputs, set_metadata, tensor_info
from .iresnet import (
    ARCH_LAYERS,
    DEFAULT_FEATURES,
    FACE_SIZE,
    IResNet,
    arch_of_layers,
    build_iresnet,
)
from .parity import sample_images, session
from .torch_onnx import export_network, within_tolerance

logger = logging.getLogger(__name__)

MODEL_NAME = "face_embedding"
INPUT_NAME = "FACE"
OUTPUT_NAME = "EMBEDDING"
# Same opset as the shipped face_embedding: every onnxruntime and TensorRT parser that
# Triton 2.51 ships accepts it (IR version 8).
OPSET = SFACE_TARGET_OPSET
# arcface_torch feeds RGB scaled as (x / 255 - 0.5) / 0.5 == (x - 127.5) / 127.5.
PIXEL_MEAN = 127.5
PIXEL_STD = 127.5
PARITY_BATCHES = (1, 3)
PARITY_TOLERANCE = 1e-4  # max abs diff of the L2-normalised embedding, torch vs onnxruntime
# Where trainers nest the backbone's weights inside a checkpoint (arcface_torch's own
# training checkpoints use "state_dict_backbone").
NESTED_KEYS = ("state_dict", "model", "state_dict_backbone")
DDP_PREFIX = "module."
_LISTED_KEYS = 8


class CheckpointError(ConversionError):
    """A checkpoint that is not a loadable IResNet state_dict of the chosen architecture."""


# --------------------------------------------------------------------------- checkpoints


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """Tensors of a checkpoint file, loaded without running pickled code."""
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint") from None
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, EOFError...
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"{path}: not a weights-only PyTorch checkpoint ({first[:300]})"
        ) from exc
    return unwrap_state_dict(obj, str(path))


def unwrap_state_dict(obj: object, what: str = "checkpoint") -> dict[str, torch.Tensor]:
    """The state_dict in ``obj``: bare, or under one of :data:`NESTED_KEYS`, with a
    DataParallel/DDP ``module.`` prefix removed."""
    if isinstance(obj, Mapping):
        for key in NESTED_KEYS:
            if isinstance(obj.get(key), Mapping):
                obj = obj[key]
                break
    if not isinstance(obj, Mapping) or not obj:
        raise CheckpointError(f"{what}: holds no state_dict (expected a mapping of tensors)")
    not_tensors = sorted(str(k) for k, v in obj.items() if not isinstance(v, torch.Tensor))
    if not_tensors:
        raise CheckpointError(
            f"{what}: not a state_dict, these entries are not tensors: {_listing(not_tensors)}"
        )
    return {_strip_prefix(str(k)): v for k, v in obj.items()}


def _strip_prefix(key: str) -> str:
    return key[len(DDP_PREFIX) :] if key.startswith(DDP_PREFIX) else key


def _listing(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_LISTED_KEYS])
    more = len(names) - _LISTED_KEYS
    return f"{shown} and {more} more" if more > 0 else shown


def stage_depths(state_dict: Mapping[str, torch.Tensor]) -> tuple[int, ...]:
    """Blocks per stage found in the keys (``layer3.29.bn1.weight`` -> stage 3 has 30)."""
    depths = []
    for stage in range(1, 5):
        blocks = {
            int(key.split(".")[1])
            for key in state_dict
            if key.startswith(f"layer{stage}.") and key.split(".")[1].isdigit()
        }
        depths.append(max(blocks) + 1 if blocks else 0)
    return tuple(depths)


def load_backbone(state_dict: Mapping[str, torch.Tensor], arch: str) -> IResNet:
    """An IResNet ``arch`` holding ``state_dict``, in eval mode; every key must match.

    The embedding size comes from ``fc.weight`` (512 for arcface_torch's models).
    """
    if arch not in ARCH_LAYERS:
        raise CheckpointError(f"unknown architecture {arch!r}; known: {', '.join(ARCH_LAYERS)}")
    fc = state_dict.get("fc.weight")
    features = int(fc.shape[0]) if fc is not None and fc.ndim == 2 else DEFAULT_FEATURES
    with torch.device("meta"):  # no memory, no initialisation: the checkpoint fills it
        net = build_iresnet(arch, num_features=features)
    expected = set(net.state_dict())
    missing = sorted(expected - set(state_dict))
    unexpected = sorted(set(state_dict) - expected)
    if missing or unexpected:
        raise CheckpointError(_key_mismatch(arch, state_dict, missing, unexpected))
    try:
        net.load_state_dict(dict(state_dict), strict=True, assign=True)
    except RuntimeError as exc:  # shapes differ: torch lists each one
        raise CheckpointError(f"checkpoint does not fit IResNet {arch}: {exc}") from exc
    return net.float().eval()  # weights saved in half precision are exported in float32


def _key_mismatch(
    arch: str, state_dict: Mapping[str, torch.Tensor], missing: list[str], unexpected: list[str]
) -> str:
    parts = [f"checkpoint does not fit IResNet {arch}"]
    if missing:
        parts.append(f"{len(missing)} missing key(s): {_listing(missing)}")
    if unexpected:
        parts.append(f"{len(unexpected)} unexpected key(s): {_listing(unexpected)}")
    found = arch_of_layers(stage_depths(state_dict))
    if found is not None and found != arch:
        parts.append(f"its blocks per stage {stage_depths(state_dict)} are those of {found}")
    return "; ".join(parts)


def load_checkpoint(path: Path, arch: str) -> IResNet:
    """:func:`read_state_dict` then :func:`load_backbone`, errors naming the file."""
    try:
        return load_backbone(read_state_dict(path), arch)
    except CheckpointError as exc:
        message = str(exc)
        if not message.startswith(str(path)):
            message = f"{path}: {message}"
        raise CheckpointError(message) from exc.__cause__


def random_backbone(arch: str, seed: int = 0) -> IResNet:
    """A seeded random IResNet with random BatchNorm statistics, for demos and tests.

    He-initialised convolutions and BatchNorm layers that do not normalise (random
    means, variances and affine terms) make the exported graph's arithmetic differ from
    an identity, so a parity check on it means something.
    """
    net = build_iresnet(arch)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in net.modules():
            _randomise(module, gen)
    return net.eval()


def _randomise(module: nn.Module, gen: torch.Generator) -> None:
    if isinstance(module, nn.Conv2d | nn.Linear):
        fan_in = module.weight[0].numel()
        module.weight.normal_(0.0, (2.0 / fan_in) ** 0.5, generator=gen)
        if module.bias is not None:
            module.bias.normal_(0.0, 0.05, generator=gen)
    elif isinstance(module, nn.BatchNorm1d | nn.BatchNorm2d):
        module.weight.uniform_(0.5, 1.0, generator=gen)
        module.bias.normal_(0.0, 0.1, generator=gen)
        module.running_mean.normal_(0.0, 0.1, generator=gen)
        module.running_var.uniform_(0.5, 2.0, generator=gen)
    elif isinstance(module, nn.PReLU):
        module.weight.uniform_(0.05, 0.3, generator=gen)


# --------------------------------------------------------------------------- export


class ServedArcFace(nn.Module):
    """The served contract in PyTorch: uint8 NHWC RGB -> L2-normalised embeddings.

    Written independently of the ONNX pre/post-processing nodes, so the parity check
    compares two implementations of the contract.
    """

    def __init__(self, backbone: IResNet) -> None:
        super().__init__()
        self.backbone = backbone

    def forward(self, faces: torch.Tensor) -> torch.Tensor:
        x = (faces.to(torch.float32) - PIXEL_MEAN) / PIXEL_STD
        x = x.permute(0, 3, 1, 2)
        return F.normalize(self.backbone(x), p=2.0, dim=1, eps=L2_EPSILON)


@dataclass(frozen=True)
class Exported:
    model: onnx.ModelProto
    arch: str
    dims: int  # embedding size D
    parity: dict[int, float]  # batch size -> max abs diff, torch vs onnxruntime


def export_onnx(backbone: IResNet, metadata: Mapping[str, str] | None = None) -> onnx.ModelProto:
    """``FACE`` uint8 ``[N,112,112,3]`` -> ``EMBEDDING`` float32 ``[N,D]``, checked."""
    model = _export_backbone(backbone)
    pre, pre_inits = preprocess_nodes(
        "data", source=INPUT_NAME, to_bgr=False, mean=[PIXEL_MEAN] * 3, scale=[1.0 / PIXEL_STD] * 3
    )
    face = tensor_info(INPUT_NAME, TensorProto.UINT8, ["N", FACE_SIZE, FACE_SIZE, 3])
    replace_input(model, "data", face, pre, pre_inits)
    post, post_inits = l2_normalize_nodes("features", OUTPUT_NAME, opset_version(model))
    embedding = tensor_info(OUTPUT_NAME, TensorProto.FLOAT, ["N", backbone.num_features])
    replace_outputs(model, [embedding], post, post_inits)
    set_metadata(model, {"kyc.model": MODEL_NAME, **(metadata or {})})
    return finish_model(model, MODEL_NAME)


def _export_backbone(backbone: IResNet) -> onnx.ModelProto:
    """The IResNet alone: ``data`` float ``[N,3,112,112]`` -> ``features`` ``[N,D]``."""
    return export_network(backbone, (1, 3, FACE_SIZE, FACE_SIZE), "data", "features", OPSET)


def check_parity(
    backbone: IResNet,
    model: onnx.ModelProto,
    batches: Sequence[int] = PARITY_BATCHES,
    tolerance: float = PARITY_TOLERANCE,
) -> dict[int, float]:
    """Max abs diff of ``EMBEDDING``, PyTorch vs onnxruntime, per batch size.

    Raises:
        ParityError: a shape differs, or a difference exceeds ``tolerance``.
    """
    reference = ServedArcFace(backbone).eval()
    sess = session(model)
    diffs: dict[int, float] = {}
    for batch in batches:
        faces = sample_images(batch, FACE_SIZE, FACE_SIZE, seed=batch)
        with torch.no_grad():
            want = reference(torch.from_numpy(faces)).numpy()
        (got,) = sess.run([OUTPUT_NAME], {INPUT_NAME: faces})
        if got.shape != want.shape:
            raise ParityError(
                f"{MODEL_NAME}: onnxruntime gives {OUTPUT_NAME} {got.shape}, torch {want.shape}"
            )
        diffs[batch] = float(np.max(np.abs(got.astype(np.float64) - want)))
    return within_tolerance(MODEL_NAME, diffs, tolerance)


def export_arcface(
    backbone: IResNet, arch: str, source: Mapping[str, str] | None = None
) -> Exported:
    """Export ``backbone`` and check it against PyTorch (see :func:`check_parity`)."""
    metadata = {"kyc.arch": f"iresnet {arch}", **(source or {})}
    model = export_onnx(backbone, metadata)
    return Exported(model, arch, backbone.num_features, check_parity(backbone, model))


def checkpoint_metadata(path: Path) -> dict[str, str]:
    """Provenance recorded in the exported model: the checkpoint's name and sha256."""
    return {"kyc.source": f"checkpoint {Path(path).name}", "kyc.source_sha256": sha256_file(path)}


def save_model(model: onnx.ModelProto, path: Path) -> Path:
    """Write ``model`` to ``path`` (replacing it whole)."""
    replace_file(Path(path), model.SerializeToString())
    return Path(path)


# --------------------------------------------------------------------------- publish


@dataclass(frozen=True)
class ArcFacePublished:
    model: str
    version: int
    path: Path
    dims: list[int]
    previous_dims: list[int]
    config_changed: bool
    warnings: list[str] = field(default_factory=list)


def output_dims(model: onnx.ModelProto, name: str = OUTPUT_NAME) -> list[int]:
    """Dims of an ONNX output past the batch dim (fixed ones only)."""
    for output in model.graph.output:
        if output.name == name:
            return [d.dim_value for d in output.type.tensor_type.shape.dim[1:]]
    raise InstallError(f"the model has no output {name!r}")


def model_config(repository: Path, model_name: str = MODEL_NAME) -> Path:
    """``<repository>/<model_name>/config.pbtxt``; :class:`PublishError` when absent."""
    path = Path(repository) / model_name / CONFIG
    if not path.is_file():
        raise PublishError(f"no model '{model_name}' in {repository} (no {model_name}/{CONFIG})")
    return path


def publish_arcface(
    repository: Path,
    model: onnx.ModelProto,
    *,
    model_name: str = MODEL_NAME,
    match_threshold: float | None = None,
    review_threshold: float | None = None,
) -> ArcFacePublished:
    """Publish ``model`` as the next version of ``model_name`` and fit its config to it.

    When the config must change (``EMBEDDING`` dims, ``match_threshold``), no state of
    the repository that a polling (or starting) server can see pairs a config with a
    version it does not fit. Triton reads the config and the version folders as
    separate files, so the switch goes through a pinned version policy:

    1. the new version is checked against the *new* config (in a scratch copy);
    2. the config is rewritten with its old contents plus a ``version_policy`` that
       serves exactly the versions served now: the server reloads the same versions;
    3. ``kyc_tools.repo.publish.publish`` stages, precompiles and renames the new version in:
       the pinned policy keeps the server off it (``force``: its check runs against
       the old config, which the new version is not meant to fit; step 1 checked it);
    4. the config is rewritten once more, atomically, with the new dims and threshold
       and the original version policy: the server now loads the new version and drops
       the old ones in one reload. Where the original policy would still serve an old
       version that does not fit, the policy names the versions that fit instead.

    Writing the config first and renaming the version in afterwards would leave a
    window with the new dims and only old versions (the reverse order, a new version
    under the old dims); a running server keeps its loaded version through a failed
    reload, but one that starts in that window has nothing to serve.

    One publisher of a model at a time: concurrent runs are not supported.
    """
    config_path = model_config(repository, model_name)
    model_dir = config_path.parent
    old_text = config_path.read_text("utf-8")
    dims = output_dims(model)
    new_text, notes = _new_config_text(old_text, dims, match_threshold, review_threshold)
    previous = _config_dims(old_text)
    with tempfile.TemporaryDirectory(prefix="kyc-arcface-") as tmp:
        # A scratch copy of the model folder holding the new config and the new version.
        scratch = Path(tmp) / Path(repository).resolve().name / model_name
        src = scratch / "new"
        src.mkdir(parents=True)
        onnx.save(model, str(src / "model.onnx"))
        if new_text == old_text:
            published = publish(Path(repository), model_name, src)
            final_notes: list[str] = []
        else:
            _check_against(new_text, scratch, src)
            published, final_notes = _switch(Path(repository), model_dir, src, old_text, new_text)
    return ArcFacePublished(
        model_name,
        published.version,
        published.path,
        dims,
        previous,
        new_text != old_text,
        [*notes, *final_notes],
    )


def _config_dims(text: str, output: str = OUTPUT_NAME) -> list[int]:
    for tensor in parse_config(text).output:
        if tensor.name == output:
            return list(tensor.dims)
    raise ConfigEditError(f"config.pbtxt: no output named {output!r}")


def _new_config_text(text: str, dims: list[int], threshold: float | None,
                     review: float | None = None) -> tuple[str, list[str]]:
    """The config for the new model; a new match threshold comes with a review threshold
    (``review``, else the same value: no review band, said in a note)."""
    notes = []
    previous = _config_dims(text)
    new = text if previous == dims else set_output_dims(text, OUTPUT_NAME, dims)
    if review is not None and threshold is None:
        raise ConfigEditError("a review threshold needs its match threshold (--match-threshold)")
    if threshold is not None:
        if not -1.0 <= threshold <= 1.0:
            raise ConfigEditError(f"match threshold {threshold} is not a cosine in [-1, 1]")
        if review is not None and not -1.0 <= review <= threshold:
            raise ConfigEditError(f"review threshold {review} is not a cosine at most the match "
                                  f"threshold {threshold}")
        new = set_string_parameter(new, THRESHOLD_KEY, repr(float(threshold)))
        new = set_string_parameter(new, REVIEW_KEY, repr(float(threshold if review is None
                                                              else review)))
        if review is None:
            notes.append(f"{REVIEW_KEY} set to the match threshold: no review band; choose one "
                         "on your own pairs and pass --review-threshold")
    elif previous != dims:
        config = parse_config(text)
        current = (
            config.parameters[THRESHOLD_KEY].string_value
            if THRESHOLD_KEY in config.parameters
            else None
        )
        what = f"{THRESHOLD_KEY} {current}" if current else f"the default {THRESHOLD_KEY}"
        notes.append(
            f"{what} was chosen for the previous {_fmt(previous)}-d model: choose one for "
            "this model on your own genuine/impostor pairs and pass --match-threshold"
        )
    return new, notes


def _fmt(dims: Sequence[int]) -> str:
    return "x".join(map(str, dims))


def _check_against(config_text: str, scratch: Path, src: Path) -> None:
    """Check ``src`` as ``kyc repo publish`` would, against ``config_text`` (written into
    the scratch model folder ``scratch``)."""
    (scratch / CONFIG).write_text(config_text, "utf-8")
    _, problems = check_model(scratch, root=scratch.parent, versions=[src])
    if problems:
        raise PublishError(
            f"{scratch.name}: the new version does not fit the updated config: "
            f"{len(problems)} problem(s)",
            problems,
        )


def _switch(
    repository: Path, model_dir: Path, src: Path, old_text: str, new_text: str
) -> tuple[Published, list[str]]:
    """Steps 2-4 of :func:`publish_arcface`."""
    config_path = model_dir / CONFIG
    served = [int(v.name) for v in served_versions(parse_config(old_text), version_dirs(model_dir))]
    # Nothing served yet: the new config can go first, and publish checks against it.
    pinned = set_version_policy(old_text, served) if served else new_text
    if pinned != old_text:
        replace_file(config_path, pinned.encode("utf-8"))
        logger.info("%s: config pinned to version(s) %s", model_dir.name, served)
    try:
        published = publish(repository, model_dir.name, src, force=bool(served))
    except BaseException:
        if pinned != old_text:
            replace_file(config_path, old_text.encode("utf-8"))
        raise
    final, notes = _final_text(repository, model_dir, new_text, published.version)
    if final != pinned:
        try:
            replace_file(config_path, final.encode("utf-8"))
        except OSError as exc:
            raise InstallError(
                f"{model_dir.name}: version {published.version} is in place but {config_path} "
                f"could not be updated ({exc}); the server keeps serving versions {served}"
            ) from exc
    logger.info("%s: version %d published with its config", model_dir.name, published.version)
    return published, notes


def _final_text(
    repository: Path, model_dir: Path, new_text: str, version: int
) -> tuple[str, list[str]]:
    """``new_text``, with a version policy that serves only versions that fit it."""
    config = parse_config(new_text)
    served = served_versions(config, version_dirs(model_dir))
    fitting = [
        int(v.name)
        for v in served
        if int(v.name) == version or not check_version(config, v, repository)
    ]
    names = [int(v.name) for v in served]
    if version in names and fitting == names:
        return new_text, []
    keep = sorted({version, *fitting})
    dropped = sorted(set(names) - set(keep))
    note = f"version_policy now serves version(s) {keep}"
    if dropped:
        note += f"; version(s) {dropped} do not fit the new config"
    return set_version_policy(new_text, keep), [note]
