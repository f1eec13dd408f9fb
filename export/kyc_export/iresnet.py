"""IResNet backbones as trained by insightface's ``arcface_torch``, written for export.

Module names, parameter names and the order of layers follow
``recognition/arcface_torch/backbones/iresnet.py`` so that a ``backbone.pth`` saved by
arcface_torch loads here with ``load_state_dict(strict=True)``:

- stem: ``conv1`` (3x3, stride 1) -> ``bn1`` -> ``prelu``;
- ``layer1..layer4`` of :class:`IBasicBlock` (64, 128, 256, 512 channels), each stage
  halving the resolution in its first block, which also carries a ``downsample``
  (``0``: 1x1 conv, ``1``: BatchNorm);
- head: ``bn2`` -> flatten -> ``dropout`` -> ``fc`` (512 * 7 * 7 -> features) ->
  ``features`` (BatchNorm1d).

The input is a float ``[N, 3, 112, 112]`` RGB face scaled to [-1, 1]; the output the
raw (not normalised) embedding. Training-only options of the original (gradient
checkpointing, fp16 autocast, dilation) are left out: they change no weights.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

# Blocks per stage, as in arcface_torch's iresnet18/34/50/100.
ARCH_LAYERS: dict[str, tuple[int, int, int, int]] = {
    "r18": (2, 2, 2, 2),
    "r34": (3, 4, 6, 3),
    "r50": (3, 4, 14, 3),
    "r100": (3, 13, 30, 3),
}
STAGE_WIDTHS = (64, 128, 256, 512)
STEM_WIDTH = 64
BN_EPS = 1e-5
FACE_SIZE = 112
# Four stride-2 stages take 112x112 down to 7x7 in front of ``fc``.
FINAL_GRID = FACE_SIZE // 2 ** len(STAGE_WIDTHS)
DEFAULT_FEATURES = 512


def _conv3x3(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, 3, stride=stride, padding=1, bias=False)


class IBasicBlock(nn.Module):
    """Pre-activation residual block: BN -> conv3x3 -> BN -> PReLU -> conv3x3 -> BN, plus
    the shortcut (``downsample`` where the shape changes)."""

    def __init__(
        self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(inplanes, eps=BN_EPS)
        self.conv1 = _conv3x3(inplanes, planes)
        self.bn2 = nn.BatchNorm2d(planes, eps=BN_EPS)
        self.prelu = nn.PReLU(planes)
        self.conv2 = _conv3x3(planes, planes, stride)
        self.bn3 = nn.BatchNorm2d(planes, eps=BN_EPS)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.prelu(self.bn2(self.conv1(self.bn1(x))))
        out = self.bn3(self.conv2(out))
        shortcut = x if self.downsample is None else self.downsample(x)
        return out + shortcut


def _stage(inplanes: int, planes: int, blocks: int) -> nn.Sequential:
    """One stage: a stride-2 block with a projection shortcut, then ``blocks - 1`` more."""
    downsample = nn.Sequential(
        nn.Conv2d(inplanes, planes, 1, stride=2, bias=False),
        nn.BatchNorm2d(planes, eps=BN_EPS),
    )
    first = IBasicBlock(inplanes, planes, stride=2, downsample=downsample)
    return nn.Sequential(first, *(IBasicBlock(planes, planes) for _ in range(blocks - 1)))


class IResNet(nn.Module):
    """arcface_torch's IResNet: ``[N, 3, 112, 112]`` float -> ``[N, num_features]``."""

    def __init__(
        self,
        layers: Sequence[int],
        num_features: int = DEFAULT_FEATURES,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if len(layers) != len(STAGE_WIDTHS) or min(layers) < 1:
            raise ValueError(f"IResNet needs {len(STAGE_WIDTHS)} stages of >= 1 block: {layers}")
        self.num_features = num_features
        self.conv1 = nn.Conv2d(3, STEM_WIDTH, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(STEM_WIDTH, eps=BN_EPS)
        self.prelu = nn.PReLU(STEM_WIDTH)
        widths = (STEM_WIDTH, *STAGE_WIDTHS)
        self.layer1 = _stage(widths[0], widths[1], layers[0])
        self.layer2 = _stage(widths[1], widths[2], layers[1])
        self.layer3 = _stage(widths[2], widths[3], layers[2])
        self.layer4 = _stage(widths[3], widths[4], layers[3])
        self.bn2 = nn.BatchNorm2d(STAGE_WIDTHS[-1], eps=BN_EPS)
        self.dropout = nn.Dropout(p=dropout)
        self.fc = nn.Linear(STAGE_WIDTHS[-1] * FINAL_GRID * FINAL_GRID, num_features)
        self.features = nn.BatchNorm1d(num_features, eps=BN_EPS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.prelu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = self.dropout(torch.flatten(self.bn2(x), 1))
        return self.features(self.fc(x))


def build_iresnet(arch: str, num_features: int = DEFAULT_FEATURES) -> IResNet:
    """An untrained IResNet of ``arch`` (``r18``, ``r34``, ``r50`` or ``r100``)."""
    try:
        layers = ARCH_LAYERS[arch]
    except KeyError:
        raise ValueError(
            f"unknown IResNet architecture {arch!r}; known: {', '.join(ARCH_LAYERS)}"
        ) from None
    return IResNet(layers, num_features=num_features)


def arch_of_layers(layers: Sequence[int]) -> str | None:
    """The architecture name with these blocks per stage, or None."""
    for arch, known in ARCH_LAYERS.items():
        if tuple(layers) == known:
            return arch
    return None
