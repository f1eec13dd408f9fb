"""MiniFASNet passive anti-spoofing checkpoints -> the ``face_antispoof`` ONNX contract.

The networks are those of minivision-ai/Silent-Face-Anti-Spoofing
(``src/model_lib/MiniFASNet.py``): MiniFASNetV1/V2 and their squeeze-excitation
variants V1SE/V2SE, written here again with the same module and parameter names, so
that a ``.pth`` saved by that project loads with ``load_state_dict(strict=True)``.

How that project feeds a model (``src/anti_spoof_predict.py``, ``src/data_io``):

- the frame is read with ``cv2.imread`` (BGR), a context crop around the face box is
  cut and resized to 80x80 (``CropImage``, see :mod:`kyc.liveness.crop`);
- its ``ToTensor`` is a modified one: HWC -> CHW and ``float()``, with *no* division
  by 255 and no mean/std: the network sees BGR values in 0..255;
- ``softmax`` over the 3 logits; class 1 is a real face (0 and 2: attack types).

The exported graph bakes that in: ``CROP`` uint8 ``[N,80,80,3]`` **RGB** -> float ->
RGB->BGR -> NCHW -> MiniFASNet -> ``PROBS`` float32 ``[N,3]`` (softmax) and ``REAL``
float32 ``[N]`` (``PROBS[:, 1]``).

A checkpoint's file name carries how it was trained: ``2.7_80x80_MiniFASNetV2.pth``
is a MiniFASNetV2 fed the face box enlarged 2.7 times, at 80x80 (:func:`parse_name`).
No weights ship with this module and none are downloaded: bring your own, or use
:func:`random_model` for tests. PyTorch is imported only by the functions that need
it, so this module imports without it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from .convert import finish_model, preprocess_nodes
from .errors import ConversionError, ParityError
from .graph import const, replace_input, replace_outputs, set_metadata, tensor_info
from .parity import sample_images, session
from .torch_onnx import export_network, within_tolerance

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

ARCHS = ("MiniFASNetV1", "MiniFASNetV2", "MiniFASNetV1SE", "MiniFASNetV2SE")
INPUT_SIZE = 80
NUM_CLASSES = 3
REAL_CLASS = 1  # the reference's label for a real (live) face
EMBEDDING_SIZE = 128  # every factory of the reference uses 128

MODEL_NAME = "face_antispoof"
INPUT_NAME = "CROP"
PROBS_NAME = "PROBS"
REAL_NAME = "REAL"
OPSET = 17
PARITY_BATCHES = (1, 3)
PARITY_TOLERANCE = 1e-4  # max abs diff of PROBS, torch vs onnxruntime
DDP_PREFIX = "module."
NESTED_KEY = "state_dict"
_LISTED_KEYS = 8

# Channel widths of the pruned networks, as the reference's ``keep_dict`` lists them:
# 49 entries: conv1 and conv2_dw (32, 32), then three per depthwise block (expand,
# depthwise, project: the first two are always equal), consumed from the offsets in
# _LAYOUT below, then conv_6_sep and conv_6_dw (512, 512). The 15 blocks project to 64
# channels (the first five) or 128; the two lists differ only in some blocks' expansions.
_EXPANSIONS: dict[str, tuple[int, ...]] = {
    "1.8M": (103, 13, 26, 13, 52, 231, 154, 52, 26, 52, 26, 26, 308, 26, 26),  # V1 / V1SE
    "1.8M_": (103, 13, 13, 13, 13, 231, 231, 52, 26, 77, 26, 26, 308, 26, 26),  # V2 / V2SE
}
_PROJECTIONS = (64,) * 5 + (128,) * 10


def _keep_list(expansions: Sequence[int]) -> tuple[int, ...]:
    """The reference's 49-entry ``keep_dict`` list for these block expansions."""
    blocks = (width for e, p in zip(expansions, _PROJECTIONS, strict=True) for width in (e, e, p))
    return (32, 32, *blocks, 512, 512)


_WIDTHS = {key: _keep_list(expansions) for key, expansions in _EXPANSIONS.items()}
# arch -> (widths, squeeze-excitation in the last block of each residual stage,
# dropout probability of the reference's factory; dropout holds no weights).
_ARCH_SPEC: dict[str, tuple[str, bool, float]] = {
    "MiniFASNetV1": ("1.8M", False, 0.2),
    "MiniFASNetV2": ("1.8M_", False, 0.2),
    "MiniFASNetV1SE": ("1.8M", True, 0.75),
    "MiniFASNetV2SE": ("1.8M_", True, 0.75),
}
# The body, in forward order: (attribute, offset into the widths, depthwise blocks,
# stride). A stride-2 entry is one plain block that halves the resolution; a stride-1
# entry is a residual stage. Offsets chain: a block at ``o`` maps widths[o] ->
# widths[o + 3], so a stage of n blocks at ``o`` ends at ``o + 3n``.
_LAYOUT = (
    ("conv_23", 1, 1, 2),
    ("conv_3", 4, 4, 1),
    ("conv_34", 16, 1, 2),
    ("conv_4", 19, 6, 1),
    ("conv_45", 37, 1, 2),
    ("conv_5", 40, 2, 1),
)
SE_REDUCTION = 4  # the reference's ResidualSE passes se_reduct=4 to its last block
_CLASS_NAMES = ("ConvBlock", "LinearBlock", "SqueezeExcite", "DepthWise", "Residual",
                "MiniFASNet")


class CheckpointError(ConversionError):
    """A checkpoint that is not a loadable state_dict of the chosen MiniFASNet."""


@dataclass(frozen=True)
class CheckpointInfo:
    """What a checkpoint's file name says: the network, the crop scale it was trained
    on (None: ``org``, the whole frame resized, or not given) and the input size."""

    arch: str
    scale: float | None
    size: int


@dataclass(frozen=True)
class Exported:
    model: onnx.ModelProto
    arch: str
    scale: float | None  # the crop scale the checkpoint was trained on, when known
    parity: dict[int, float]  # batch size -> max abs diff of PROBS, torch vs onnxruntime


# --------------------------------------------------------------------------- names


_NAME = re.compile(
    r"^(?P<patch>.+)_(?P<h>\d+)x(?P<w>\d+)_(?P<arch>[A-Za-z0-9]+?)(?:\.pth|\.pt)?$"
)


def parse_name(name: str) -> CheckpointInfo:
    """Architecture, crop scale and input size from a checkpoint's file name.

    The reference's convention (``utility.parse_model_name``) is
    ``<patch>_<H>x<W>_<arch>.pth``, where ``<patch>`` starts with the scale
    (``2.7``, or ``4_0_0``: scale 4 with zero shifts) or ``org`` (no crop: the whole
    frame resized, scale None). Only square inputs are supported here.

    Raises:
        ValueError: the name does not follow the convention, names an unknown
            architecture, a bad scale or a non-square input.
    """
    base = Path(str(name)).name
    match = _NAME.match(base)
    expected = "expected <scale>_<H>x<W>_<arch>.pth, e.g. 2.7_80x80_MiniFASNetV2.pth"
    if match is None:
        raise ValueError(f"checkpoint name {base!r} does not follow the convention: {expected}")
    arch = match["arch"]
    if arch not in ARCHS:
        raise ValueError(
            f"checkpoint name {base!r}: unknown architecture {arch!r}; known: {', '.join(ARCHS)}"
        )
    height, width = int(match["h"]), int(match["w"])
    if height != width or height <= 0:
        raise ValueError(
            f"checkpoint name {base!r}: input {height}x{width} is not supported "
            "(square inputs only)"
        )
    head = match["patch"].split("_")[0]
    if head == "org":
        scale = None
    else:
        try:
            scale = float(head)
        except ValueError:
            raise ValueError(
                f"checkpoint name {base!r}: {head!r} is not a crop scale; {expected}"
            ) from None
        if not np.isfinite(scale) or scale <= 0:
            raise ValueError(f"checkpoint name {base!r}: crop scale {head!r} is not positive")
    return CheckpointInfo(arch, scale, height)


# --------------------------------------------------------------------------- networks


@functools.lru_cache(maxsize=1)
def _layers() -> SimpleNamespace:
    """The network classes, defined on first use so that importing this module does
    not import torch. Module attribute names follow the reference exactly; the class
    names are ours (a state_dict does not record them)."""
    from torch import nn

    conv = _conv_classes(nn)
    classes = SimpleNamespace(**vars(conv), **vars(_stage_classes(nn, conv)))
    classes.MiniFASNet = _network_class(nn, classes)
    for cls in vars(classes).values():  # picklable as kyc_export.minifasnet.<name>
        cls.__module__, cls.__qualname__ = __name__, cls.__name__
    return classes


def _conv_classes(nn: ModuleType) -> SimpleNamespace:
    """ConvBlock, LinearBlock and SqueezeExcite: the convolutions the blocks are made of."""

    class ConvBlock(nn.Module):
        """conv (no bias) -> BatchNorm -> PReLU (the reference's ``Conv_block``)."""

        def __init__(self, cin: int, cout: int, kernel: int = 1, stride: int = 1,
                     padding: int = 0, groups: int = 1) -> None:
            super().__init__()
            self.conv = nn.Conv2d(cin, cout, kernel, stride, padding, groups=groups, bias=False)
            self.bn = nn.BatchNorm2d(cout)
            self.prelu = nn.PReLU(cout)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.prelu(self.bn(self.conv(x)))

    class LinearBlock(nn.Module):
        """conv (no bias) -> BatchNorm, no activation (``Linear_block``)."""

        def __init__(self, cin: int, cout: int, kernel: int = 1, groups: int = 1) -> None:
            super().__init__()
            self.conv = nn.Conv2d(cin, cout, kernel, groups=groups, bias=False)
            self.bn = nn.BatchNorm2d(cout)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.bn(self.conv(x))

    class SqueezeExcite(nn.Module):
        """Channel gating: global mean -> 1x1 conv, BN, ReLU -> 1x1 conv, BN -> sigmoid,
        multiplied into the input (``SEModule``)."""

        def __init__(self, channels: int, reduction: int) -> None:
            super().__init__()
            hidden = channels // reduction
            self.avg_pool = nn.AdaptiveAvgPool2d(1)
            self.fc1 = nn.Conv2d(channels, hidden, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(hidden)
            self.relu = nn.ReLU(inplace=True)
            self.fc2 = nn.Conv2d(hidden, channels, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(channels)
            self.sigmoid = nn.Sigmoid()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            gate = self.relu(self.bn1(self.fc1(self.avg_pool(x))))
            return x * self.sigmoid(self.bn2(self.fc2(gate)))

    return SimpleNamespace(ConvBlock=ConvBlock, LinearBlock=LinearBlock,
                           SqueezeExcite=SqueezeExcite)


def _stage_classes(nn: ModuleType, conv: SimpleNamespace) -> SimpleNamespace:
    """DepthWise and Residual, built of ``conv``'s classes."""

    class DepthWise(nn.Module):
        """1x1 expand -> 3x3 depthwise (``stride``) -> 1x1 linear projection, plus the
        input when ``residual``; ``se`` gates the projection before the sum
        (``Depth_Wise`` / ``Depth_Wise_SE``)."""

        def __init__(self, widths: Sequence[int], offset: int, stride: int,
                     residual: bool, se: bool) -> None:
            super().__init__()
            cin, expand, dw, out = widths[offset:offset + 4]
            self.conv = conv.ConvBlock(cin, expand)
            self.conv_dw = conv.ConvBlock(expand, dw, 3, stride, 1, groups=expand)
            self.project = conv.LinearBlock(dw, out)
            self.residual = residual
            if se:
                self.se_module = conv.SqueezeExcite(out, SE_REDUCTION)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.project(self.conv_dw(self.conv(x)))
            if not self.residual:  # the reference applies SE only on residual blocks
                return y
            if hasattr(self, "se_module"):
                y = self.se_module(y)
            return x + y

    class Residual(nn.Module):
        """A stage of residual depthwise blocks held in ``model`` (``Residual`` /
        ``ResidualSE``: with ``se``, the last block carries squeeze-excitation)."""

        def __init__(self, widths: Sequence[int], offset: int, blocks: int, se: bool) -> None:
            super().__init__()
            self.model = nn.Sequential(*(
                DepthWise(widths, offset + 3 * i, 1, residual=True, se=se and i == blocks - 1)
                for i in range(blocks)
            ))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.model(x)

    return SimpleNamespace(DepthWise=DepthWise, Residual=Residual)


def _network_class(nn: ModuleType, blocks: SimpleNamespace) -> type:
    """MiniFASNet, built of ``blocks``' classes."""
    ConvBlock, LinearBlock = blocks.ConvBlock, blocks.LinearBlock  # noqa: N806 - classes

    class MiniFASNet(nn.Module):
        """float ``[N,3,S,S]`` (BGR, 0..255) -> logits ``[N,num_classes]``."""

        def __init__(self, arch: str, num_classes: int = NUM_CLASSES,
                     size: int = INPUT_SIZE) -> None:
            super().__init__()
            widths_key, se, drop_p = _ARCH_SPEC[arch]
            w = _WIDTHS[widths_key]
            self.arch = arch
            self.input_size = size
            self.num_classes = num_classes
            self.embedding_size = EMBEDDING_SIZE
            self.conv1 = ConvBlock(3, w[0], 3, 2, 1)
            self.conv2_dw = ConvBlock(w[0], w[1], 3, 1, 1, groups=w[1])
            for name, offset, count, stride in _LAYOUT:
                if stride == 1:
                    layer = blocks.Residual(w, offset, count, se)
                else:
                    layer = blocks.DepthWise(w, offset, stride, residual=False, se=False)
                setattr(self, name, layer)
            self.conv_6_sep = ConvBlock(w[46], w[47])
            # Four stride-2 layers leave ceil(size / 16) pixels a side: the depthwise
            # kernel spans them all (the reference's get_kernel), giving 1x1.
            self.conv_6_dw = LinearBlock(w[47], w[48], conv6_kernel(size), groups=w[48])
            self.conv_6_flatten = nn.Flatten()
            self.linear = nn.Linear(512, EMBEDDING_SIZE, bias=False)
            self.bn = nn.BatchNorm1d(EMBEDDING_SIZE)
            self.drop = nn.Dropout(drop_p)
            self.prob = nn.Linear(EMBEDDING_SIZE, num_classes, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.conv2_dw(self.conv1(x))
            for name, _, _, _ in _LAYOUT:
                x = getattr(self, name)(x)
            x = self.conv_6_flatten(self.conv_6_dw(self.conv_6_sep(x)))
            if self.embedding_size != 512:  # as the reference: no projection at 512
                x = self.linear(x)
            return self.prob(self.drop(self.bn(x)))

    return MiniFASNet


def __getattr__(name: str) -> Any:
    """``minifasnet.MiniFASNet`` and the block classes, built (importing torch) on use."""
    if name in _CLASS_NAMES:
        return getattr(_layers(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def conv6_kernel(size: int) -> int:
    """Side of the last depthwise kernel for a ``size`` input: ceil(size / 16)."""
    return (size + 15) // 16


def build(arch: str, num_classes: int = NUM_CLASSES, size: int = INPUT_SIZE) -> torch.nn.Module:
    """A MiniFASNet ``arch`` (PyTorch's default initialisation) for ``size`` x ``size``
    inputs, in eval mode."""
    if arch not in ARCHS:
        raise ValueError(f"unknown architecture {arch!r}; known: {', '.join(ARCHS)}")
    if size < 16 or num_classes < 1:
        raise ValueError(f"{arch}: input size {size} or class count {num_classes} too small")
    return _layers().MiniFASNet(arch, num_classes, size).eval()


# --------------------------------------------------------------------------- checkpoints


def load_checkpoint(path: Path, arch: str | None = None) -> tuple[torch.nn.Module, CheckpointInfo]:
    """The network in the checkpoint file ``path``, loaded strictly, in eval mode.

    ``arch`` defaults to the one in the file name (:func:`parse_name`); given, it
    wins over the name, and a name outside the convention is then accepted (scale
    None, size 80). The file must hold a state_dict, bare or under ``"state_dict"``,
    keys optionally prefixed ``module.`` (DataParallel); it is read with
    ``weights_only=True``, so a pickled module (code) is refused, not run. The class
    count comes from ``prob.weight``.

    Raises:
        ValueError: no ``arch`` and the name does not tell it.
        CheckpointError: unreadable, not a state_dict, or keys/shapes that do not fit
            (the message names the missing and unexpected keys).
    """
    import torch

    path = Path(path)
    try:
        info = parse_name(path.name)
    except ValueError:
        if arch is None:
            raise
        info = CheckpointInfo(arch, None, INPUT_SIZE)
    if arch is not None:
        if arch not in ARCHS:
            raise ValueError(f"unknown architecture {arch!r}; known: {', '.join(ARCHS)}")
        info = CheckpointInfo(arch, info.scale, info.size)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint") from None
    except Exception as exc:  # UnpicklingError, RuntimeError, EOFError, ...
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise CheckpointError(
            f"{path}: not a weights-only PyTorch checkpoint ({first[:300]})"
        ) from exc
    try:
        model = load_state_dict(_unwrap(obj), info.arch, info.size)
    except CheckpointError as exc:
        raise CheckpointError(f"{path}: {exc}") from exc.__cause__
    return model, info


def _unwrap(obj: object) -> dict[str, torch.Tensor]:
    """The state_dict in ``obj`` (bare or under ``"state_dict"``), ``module.`` stripped."""
    import torch

    if isinstance(obj, Mapping) and isinstance(obj.get(NESTED_KEY), Mapping):
        obj = obj[NESTED_KEY]
    if not isinstance(obj, Mapping) or not obj:
        raise CheckpointError("holds no state_dict (expected a mapping of names to tensors)")
    not_tensors = sorted(str(k) for k, v in obj.items() if not isinstance(v, torch.Tensor))
    if not_tensors:
        raise CheckpointError(f"not a state_dict: these entries are not tensors: "
                              f"{_listing(not_tensors)}")
    # The reference strips the first 7 characters of every key when the first one has
    # the prefix; stripping it wherever it starts a key is the same for DataParallel.
    return {
        (k[len(DDP_PREFIX):] if k.startswith(DDP_PREFIX) else k): v
        for k, v in ((str(k), v) for k, v in obj.items())
    }


def load_state_dict(
    state_dict: Mapping[str, torch.Tensor], arch: str, size: int = INPUT_SIZE
) -> torch.nn.Module:
    """A MiniFASNet ``arch`` holding ``state_dict`` (every key must match), eval mode."""
    prob = state_dict.get("prob.weight")
    classes = int(prob.shape[0]) if prob is not None and prob.ndim == 2 else NUM_CLASSES
    net = build(arch, classes, size)
    expected = set(net.state_dict())
    # A BatchNorm counter missing from an old checkpoint holds no weights: torch's
    # strict load fills it in, as it does for the reference.
    missing = sorted(k for k in expected - set(state_dict)
                     if not k.endswith(".num_batches_tracked"))
    unexpected = sorted(set(state_dict) - expected)
    if missing or unexpected:
        raise CheckpointError(_mismatch(arch, state_dict, missing, unexpected))
    try:
        net.load_state_dict(dict(state_dict), strict=True)
    except RuntimeError as exc:  # shapes differ: torch lists each one
        fits = _fitting_arch(state_dict)
        hint = f" (its shapes are those of {fits})" if fits not in (None, arch) else ""
        raise CheckpointError(f"checkpoint does not fit {arch}{hint}: {exc}") from exc
    return net.float().eval()


def _fitting_arch(state_dict: Mapping[str, Any]) -> str | None:
    """The architecture whose parameter names and shapes are exactly those of
    ``state_dict`` (BatchNorm counters aside), if one is."""
    import torch

    def shapes(items: Any) -> dict[str, tuple[int, ...]]:
        return {k: tuple(v.shape) for k, v in items if not k.endswith(".num_batches_tracked")}

    have = shapes(state_dict.items())
    prob = state_dict.get("prob.weight")
    classes = int(prob.shape[0]) if prob is not None and prob.ndim == 2 else NUM_CLASSES
    for candidate in ARCHS:
        with torch.device("meta"):  # shapes only: no memory, no initialisation
            net = _layers().MiniFASNet(candidate, classes)
        if shapes(net.state_dict().items()) == have:
            return candidate
    return None


def _mismatch(arch: str, state_dict: Mapping[str, Any], missing: list[str],
              unexpected: list[str]) -> str:
    parts = [f"checkpoint does not fit {arch}"]
    if missing:
        parts.append(f"{len(missing)} missing key(s): {_listing(missing)}")
    if unexpected:
        parts.append(f"{len(unexpected)} unexpected key(s): {_listing(unexpected)}")
    fits = _fitting_arch(state_dict)
    if fits is not None and fits != arch:
        parts.append(f"its keys and shapes are those of {fits}")
    if any(k.startswith("FTGenerator.") for k in state_dict):
        parts.append("it looks like a MultiFTNet training checkpoint: keep the keys under "
                     "'model.' without that prefix")
    return "; ".join(parts)


def _listing(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_LISTED_KEYS])
    more = len(names) - _LISTED_KEYS
    return f"{shown} and {more} more" if more > 0 else shown


def random_model(arch: str, seed: int) -> torch.nn.Module:
    """A MiniFASNet ``arch`` with seeded random weights, for tests and demos, eval mode.

    Weights are He-normal, PReLU slopes and BatchNorm affine terms random. The
    BatchNorm running statistics are random too, drawn around the statistics of a
    seeded batch of random crops (fed as the reference feeds them, 0..255): a network
    with unit statistics on 0..255 inputs would saturate its softmax at 0 or 1, and a
    parity check on such probabilities would compare constants.
    """
    import torch
    from torch import nn

    net = build(arch)
    gen = torch.Generator().manual_seed(seed)
    norms = [m for m in net.modules() if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d))]
    with torch.no_grad():
        for module in net.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                fan_in = module.weight[0].numel()
                module.weight.normal_(0.0, (2.0 / fan_in) ** 0.5, generator=gen)
            elif isinstance(module, nn.PReLU):
                module.weight.uniform_(0.05, 0.3, generator=gen)
        for bn in norms:
            bn.weight.uniform_(0.5, 1.5, generator=gen)
            bn.bias.normal_(0.0, 0.2, generator=gen)
        # Each BatchNorm normalises with its batch statistics in train mode and records
        # them (momentum None: a plain average, here over one batch).
        for bn in norms:
            bn.reset_running_stats()
            bn.momentum = None
            bn.train()
        crops = sample_images(16, net.input_size, net.input_size, seed=seed)
        net(reference_input(crops))
        for bn in norms:
            std = bn.running_var.sqrt()
            noise = torch.empty_like(std).normal_(0.0, 0.2, generator=gen)
            bn.running_mean.add_(noise * std)
            bn.running_var.mul_(torch.empty_like(std).uniform_(0.7, 1.4, generator=gen))
            bn.momentum = 0.1
    return net.eval()


# --------------------------------------------------------------------------- export


def reference_input(crops: np.ndarray) -> torch.Tensor:
    """RGB uint8 crops ``[N,S,S,3]`` as the reference feeds them: BGR (its frames come
    from ``cv2.imread``), CHW, ``float()`` with no scaling (its modified ToTensor)."""
    import torch

    bgr = np.ascontiguousarray(np.asarray(crops)[..., ::-1].transpose(0, 3, 1, 2))
    return torch.from_numpy(bgr).float()


def to_onnx(model: torch.nn.Module, opset: int = OPSET) -> onnx.ModelProto:
    """``CROP`` uint8 ``[N,S,S,3]`` RGB -> ``PROBS`` float32 ``[N,3]`` and ``REAL``
    float32 ``[N]``, the reference's input preparation (BGR, 0..255, NCHW) and softmax
    in the graph; checked by the ONNX checker, subnormal weights flushed."""
    classes = int(getattr(model, "num_classes", NUM_CLASSES))
    if classes != NUM_CLASSES:
        raise ConversionError(
            f"{MODEL_NAME}: the contract is {NUM_CLASSES} classes with class {REAL_CLASS} = "
            f"real face; this network has {classes}"
        )
    size = int(getattr(model, "input_size", INPUT_SIZE))
    onnx_model = _export_network(model, size, opset)
    pre, pre_inits = preprocess_nodes("data", source=INPUT_NAME, to_bgr=True)
    crop = tensor_info(INPUT_NAME, TensorProto.UINT8, ["N", size, size, 3])
    replace_input(onnx_model, "data", crop, pre, pre_inits)
    post = [
        helper.make_node("Softmax", ["logits"], [PROBS_NAME], name="kyc_post/softmax", axis=1),
        helper.make_node("Gather", [PROBS_NAME, "kyc_post/real_class"], [REAL_NAME],
                         name="kyc_post/real", axis=1),
    ]
    replace_outputs(
        onnx_model,
        [
            tensor_info(PROBS_NAME, TensorProto.FLOAT, ["N", NUM_CLASSES]),
            tensor_info(REAL_NAME, TensorProto.FLOAT, ["N"]),
        ],
        post,
        [const("kyc_post/real_class", REAL_CLASS, np.int64)],  # a scalar: drops the axis
    )
    arch = getattr(model, "arch", "MiniFASNet")
    set_metadata(onnx_model, {"kyc.model": MODEL_NAME, "kyc.arch": str(arch),
                              "kyc.input_size": str(size)})
    return finish_model(onnx_model, MODEL_NAME)


def _export_network(model: torch.nn.Module, size: int, opset: int) -> onnx.ModelProto:
    """The network alone: ``data`` float ``[N,3,S,S]`` -> ``logits`` ``[N,C]``."""
    return export_network(model, (1, 3, size, size), "data", "logits", opset)


def check_parity(
    model: torch.nn.Module,
    onnx_model: onnx.ModelProto,
    batches: Sequence[int] = PARITY_BATCHES,
    seed: int = 0,
) -> dict[int, float]:
    """Max abs diff of ``PROBS``, PyTorch vs onnxruntime, per batch size.

    The same random uint8 RGB crops go to both: the ONNX model takes the batch
    whole, PyTorch gets each crop alone, prepared as the reference's ``predict``
    does (BGR float 0..255, ``unsqueeze(0)``, ``softmax``).

    Raises:
        ParityError: a shape differs, ``REAL`` is not ``PROBS[:, 1]``, or a difference
            exceeds 1e-4.
    """
    import torch

    size = int(getattr(model, "input_size", INPUT_SIZE))
    sess = session(onnx_model)
    model = model.eval()
    diffs: dict[int, float] = {}
    for batch in batches:
        crops = sample_images(batch, size, size, seed=seed * 1000 + batch)
        with torch.no_grad():
            want = np.concatenate([
                torch.softmax(model(reference_input(crop[None])), dim=1).numpy()
                for crop in crops
            ])
        probs, real = sess.run([PROBS_NAME, REAL_NAME], {INPUT_NAME: crops})
        if probs.shape != want.shape or real.shape != (batch,):
            raise ParityError(
                f"{MODEL_NAME}: onnxruntime gives {PROBS_NAME} {probs.shape} and {REAL_NAME} "
                f"{real.shape}, torch {want.shape}"
            )
        if not np.array_equal(real, probs[:, REAL_CLASS]):
            raise ParityError(f"{MODEL_NAME}: {REAL_NAME} is not {PROBS_NAME}[:, {REAL_CLASS}]")
        diffs[batch] = float(np.max(np.abs(probs.astype(np.float64) - want)))
    return within_tolerance(MODEL_NAME, diffs, PARITY_TOLERANCE)


def export(
    arch: str, checkpoint: Path | None = None, random_init: int | None = None
) -> Exported:
    """Export a checkpoint (or, with ``random_init``, a seeded random network) of
    ``arch`` and check it against PyTorch; exactly one source must be given.

    The crop scale comes from the checkpoint's name (None for a random network) and
    is recorded in the model's metadata (``kyc.crop_scale``) with the source.
    """
    from kyc_tools.assets.fetch import sha256_file

    if (checkpoint is None) == (random_init is None):
        raise ValueError("export: give exactly one of checkpoint and random_init")
    if checkpoint is not None:
        net, info = load_checkpoint(Path(checkpoint), arch)
        scale = info.scale
        source = {"kyc.source": f"checkpoint {Path(checkpoint).name}",
                  "kyc.source_sha256": sha256_file(Path(checkpoint))}
    else:
        net = random_model(arch, int(random_init))
        scale = None
        source = {"kyc.source": f"random init seed {int(random_init)}"}
    model = to_onnx(net)
    extra = dict(source)
    if scale is not None:
        extra["kyc.crop_scale"] = f"{scale:g}"
    set_metadata(model, extra)
    return Exported(model, arch, scale, check_parity(net, model))
