"""What :mod:`kyc_export.arcface` and :mod:`kyc_export.minifasnet` share: a PyTorch
network's export to ONNX and the verdict on their parity. PyTorch is imported only by
:func:`export_network`."""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import onnx

from .errors import ParityError

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch


def export_network(
    network: torch.nn.Module, input_shape: Sequence[int], input_name: str, output_name: str,
    opset: int,
) -> onnx.ModelProto:
    """``network`` in eval mode, alone: ``input_name`` float ``input_shape`` (the first
    dim dynamic, ``N``) -> ``output_name`` (first dim ``N``), constants folded."""
    import torch

    dummy = torch.zeros(*input_shape)
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        # The TorchScript exporter is deprecated but present in torch 2.13 and needs
        # no onnxscript; it writes plain ONNX at the requested opset.
        warnings.simplefilter("ignore", DeprecationWarning)
        path = Path(tmp) / "network.onnx"
        torch.onnx.export(
            network.eval(),
            (dummy,),
            str(path),
            input_names=[input_name],
            output_names=[output_name],
            dynamic_axes={input_name: {0: "N"}, output_name: {0: "N"}},
            opset_version=opset,
            do_constant_folding=True,
            dynamo=False,
        )
        return onnx.load(str(path))


def within_tolerance(model_name: str, diffs: dict[int, float], tolerance: float
                     ) -> dict[int, float]:
    """``diffs`` (batch size -> max abs diff, PyTorch vs onnxruntime), when every one
    is within ``tolerance``.

    Raises:
        ParityError: naming each batch over ``tolerance``.
    """
    bad = {b: d for b, d in diffs.items() if not d <= tolerance}
    if bad:
        detail = ", ".join(f"batch {b}: {d:.3g}" for b, d in bad.items())
        raise ParityError(
            f"{model_name}: ONNX differs from PyTorch by more than {tolerance:g} ({detail})"
        )
    return diffs
