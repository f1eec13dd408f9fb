"""``mrz_rec`` version 2: an MRZ line recogniser trained here, from nothing but the
project's own generator of MRZ lines (:mod:`kyc_tools.dev.synthetic.mrz_lines`: OCR-B
from Debian's fonts-ocr-b, every character Doc 9303 allows, TD1, TD2 and TD3, phone
photo degradations, crops cut as the detector's boxes are).

The network (:class:`MrzNet`, 0.3 M parameters): the crop in grey, five 3x3
convolution blocks that take the height from 48 to 1 and the width to a quarter (a
time step every 4 pixels: a 44-character line squeezed to about 690 pixels has 172
steps, room for the blank CTC needs between two fillers), two 1-D convolutions along
the line (a receptive field of about 3 characters on each side), and a softmax over
the CTC blank and the 37 MRZ characters. Trained with CTC loss (AdamW, one-cycle
learning rate) on the CPU; seeded: the same seed and version of torch give the same
weights.

The served graph (``mrz_rec``'s contract, docs/mrz-reading.md): ``IMAGES`` uint8
``[N, 48, W, 3]`` (the crop the reader squeezed, padded with grey 127) -> ``PROBS``
float32 ``[N, W/4, 38]``. PyTorch is imported only here, only when training or
exporting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from kyc.document.lines import REC_HEIGHT
from kyc.document.mrz_rec import MRZ_ALPHABET, MRZ_CLASS_COUNT

from .errors import ConversionError, ParityError

log = logging.getLogger(__name__)

MODEL_NAME = "mrz_rec"
STRIDE = 4
WIDTH = 96  # channels along the line
OPSET = 17
PARITY_TOLERANCE = 1e-4
# The reader's squeeze of an MRZ crop and its widest crop (OcrSettings defaults).
SQUEEZE = 0.6
MAX_WIDTH = 1600


@dataclass(frozen=True)
class Recipe:
    """Everything the weights depend on (besides torch's version), written into the ONNX
    metadata; the shipped version's is pinned in the manifest (``trained.mrz_rec``)."""

    seed: int
    pages: int  # rendered pages, TD1, TD2 and TD3 in turn: 2.33 MRZ lines a page
    crops_per_line: int
    epochs: int
    batch: int
    learning_rate: float

    @classmethod
    def pinned(cls, **changes) -> Recipe:
        """The manifest's recipe (``trained.mrz_rec.recipe``), with ``changes``."""
        from kyc_tools.assets.manifest import load_manifest

        fields = dict(load_manifest().trained[MODEL_NAME]["recipe"])
        fields.update({k: v for k, v in changes.items() if v is not None})
        return cls(**fields)

    def describe(self) -> str:
        return (f"kyc_tools.dev.synthetic.mrz_lines seed {self.seed}, {self.pages} pages x "
                f"{self.crops_per_line} crops a line; {self.epochs} epochs of batch "
                f"{self.batch}, AdamW one-cycle lr {self.learning_rate}")


def network():
    """A fresh :class:`MrzNet` (torch imported here)."""
    import torch
    from torch import nn

    def block(cin: int, cout: int, pool: tuple[int, int] | None) -> list[nn.Module]:
        layers = [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                  nn.ReLU(inplace=True)]
        return layers + ([nn.MaxPool2d(pool)] if pool else [])

    class MrzNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(
                *block(1, 16, (2, 2)), *block(16, 32, (2, 2)), *block(32, 48, (2, 1)),
                *block(48, 64, (2, 1)), nn.Conv2d(64, WIDTH, (3, 1), bias=False),
                nn.BatchNorm2d(WIDTH), nn.ReLU(inplace=True))
            self.context = nn.Sequential(
                nn.Conv1d(WIDTH, WIDTH, 5, padding=2, bias=False), nn.BatchNorm1d(WIDTH),
                nn.ReLU(inplace=True), nn.Conv1d(WIDTH, WIDTH, 5, padding=2, bias=False),
                nn.BatchNorm1d(WIDTH), nn.ReLU(inplace=True))
            self.head = nn.Conv1d(WIDTH, MRZ_CLASS_COUNT, 1)

        def logits(self, grey: torch.Tensor) -> torch.Tensor:
            """[N, 1, 48, W] in -1..1 -> [N, C, W/4]."""
            x = self.features(grey)  # [N, 128, 1, W/4]
            return self.head(self.context(x.squeeze(2)))

        def forward(self, images: torch.Tensor) -> torch.Tensor:
            """The served graph: uint8 [N, 48, W, 3] -> [N, W/4, C] probabilities."""
            grey = images.float().mean(dim=3).unsqueeze(1) / 127.5 - 1.0
            return torch.softmax(self.logits(grey), dim=1).transpose(1, 2)

    torch.manual_seed(0)
    return MrzNet()


def samples(recipe: Recipe) -> tuple[list[np.ndarray], list[str]]:
    """The grey crops and their lines the recipe trains on."""
    from kyc_tools.dev.synthetic.mrz_lines import line_samples

    rng = np.random.default_rng(recipe.seed)
    images, texts = [], []
    for sample in line_samples(rng, recipe.pages, squeeze=SQUEEZE, max_width=MAX_WIDTH,
                               crops_per_line=recipe.crops_per_line):
        images.append(sample.image.mean(axis=2).astype(np.uint8))
        texts.append(sample.text)
    return images, texts


def _batches(widths: Sequence[int], size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Indices in batches of crops of similar width (little padding), shuffled."""
    order = np.argsort(np.asarray(widths) + rng.uniform(0, 40, len(widths)))
    batches = [order[k:k + size] for k in range(0, len(order), size)]
    rng.shuffle(batches)
    return batches


def _augment(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Contrast, brightness and width drawn again; a grey margin on the right (padding)."""
    import cv2

    width = max(8, int(image.shape[1] * rng.uniform(0.9, 1.1)))
    out = cv2.resize(image, (width, REC_HEIGHT), interpolation=cv2.INTER_LINEAR)
    out = out.astype(np.float32) * rng.uniform(0.6, 1.3) + rng.uniform(-40, 40)
    return out.clip(0, 255)


def _tensor_batch(images: list[np.ndarray], texts: list[str], rng: np.random.Generator):
    import torch

    drawn = [_augment(image, rng) for image in images]
    width = -(-max(d.shape[1] for d in drawn) // 64) * 64
    grey = np.full((len(drawn), 1, REC_HEIGHT, width), 127.0, np.float32)
    for row, image in enumerate(drawn):
        grey[row, 0, :, :image.shape[1]] = image
    index = {c: k + 1 for k, c in enumerate(MRZ_ALPHABET)}
    targets = torch.tensor([index[c] for text in texts for c in text], dtype=torch.long)
    lengths = torch.tensor([len(t) for t in texts], dtype=torch.long)
    steps = torch.tensor([-(-d.shape[1] // STRIDE) for d in drawn], dtype=torch.long)
    return torch.from_numpy(grey / 127.5 - 1.0), targets, lengths, steps


def train(recipe: Recipe, progress=print):
    """The trained network (eval mode) and a line on how it went. One crop in 40 is kept
    aside: each epoch ends with the share of them read exactly (greedy decoding)."""
    import torch

    torch.manual_seed(recipe.seed)
    rng = np.random.default_rng(recipe.seed + 1)
    started = time.monotonic()
    images, texts = samples(recipe)
    aside = set(range(0, len(images), 40))
    fit = [i for i in range(len(images)) if i not in aside]
    progress(f"{len(images)} line crops in {time.monotonic() - started:.0f} s")
    net = network()
    steps_total = recipe.epochs * -(-len(fit) // recipe.batch)
    optimiser = torch.optim.AdamW(net.parameters(), lr=recipe.learning_rate, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, recipe.learning_rate,
                                                   total_steps=steps_total, pct_start=0.1)
    ctc = torch.nn.CTCLoss(blank=0, zero_infinity=True)
    for epoch in range(recipe.epochs):
        net.train()
        losses = []
        for batch in _batches([images[i].shape[1] for i in fit], recipe.batch, rng):
            chosen = [fit[i] for i in batch]
            grey, targets, lengths, steps = _tensor_batch(
                [images[i] for i in chosen], [texts[i] for i in chosen], rng)
            log_probs = torch.log_softmax(net.logits(grey), dim=1).permute(2, 0, 1)
            loss = ctc(log_probs, targets, steps, lengths)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
            losses.append(loss.item())
        exact = _exact_share(net, [images[i] for i in sorted(aside)],
                             [texts[i] for i in sorted(aside)])
        progress(f"epoch {epoch + 1}/{recipe.epochs}: CTC loss {np.mean(losses):.4f}, "
                 f"{exact:.1%} of {len(aside)} crops aside read exactly "
                 f"({time.monotonic() - started:.0f} s)")
    net.eval()
    return net, (f"{len(fit)} crops, {recipe.epochs} epochs, {exact:.1%} of the crops aside "
                 f"read exactly, {time.monotonic() - started:.0f} s on {torch.get_num_threads()} "
                 "threads")


def _exact_share(net, images: list[np.ndarray], texts: list[str]) -> float:
    """The share of ``images`` whose greedy reading is their text."""
    import torch

    from kyc.document.lines import ctc_greedy

    net.eval()
    exact = 0
    with torch.no_grad():
        for image, text in zip(images, texts, strict=True):
            batch = np.repeat(image[None, :, :, None], 3, axis=3)
            probs = net(torch.from_numpy(batch)).numpy()[0]
            exact += ctc_greedy(probs, MRZ_ALPHABET)[0] == text
    net.train()
    return exact / max(len(images), 1)


def to_onnx(net, recipe: Recipe, trained: str) -> onnx.ModelProto:
    """The served graph of ``net`` with its recipe in the metadata."""
    import tempfile
    import warnings

    import torch

    dummy = torch.full((2, REC_HEIGHT, 256, 3), 127, dtype=torch.uint8)
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        path = Path(tmp) / "mrz_rec.onnx"
        torch.onnx.export(net.eval(), (dummy,), str(path), input_names=["IMAGES"],
                          output_names=["PROBS"], opset_version=OPSET,
                          dynamic_axes={"IMAGES": {0: "N", 2: "W"}, "PROBS": {0: "N", 1: "T"}},
                          do_constant_folding=True, dynamo=False)
        model = onnx.load(str(path))
    meta = {"kyc.model": MODEL_NAME, "kyc.classes": MRZ_ALPHABET, "kyc.stride": str(STRIDE),
            "kyc.recipe": recipe.describe(), "kyc.trained": trained,
            "kyc.trainer": f"torch {torch.__version__}, kyc_export.mrz_rec"}
    for key, value in meta.items():
        model.metadata_props.add(key=key, value=value)
    onnx.checker.check_model(model)
    return model


def parity(net, model: onnx.ModelProto, seed: int = 7) -> float:
    """The largest difference between PyTorch and onnxruntime on crops of the generator
    (batch of 3, one width); raises :class:`ParityError` over the tolerance."""
    import onnxruntime as ort
    import torch

    from kyc_tools.dev.synthetic.mrz_lines import line_samples

    crops = [s.image for s in line_samples(np.random.default_rng(seed), 2, squeeze=SQUEEZE,
                                           max_width=MAX_WIDTH)][:3]
    width = -(-max(c.shape[1] for c in crops) // 64) * 64
    batch = np.full((len(crops), REC_HEIGHT, width, 3), 127, np.uint8)
    for row, crop in enumerate(crops):
        batch[row, :, :crop.shape[1]] = crop
    with torch.no_grad():
        expected = net(torch.from_numpy(batch)).numpy()
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(["PROBS"], {"IMAGES": batch})[0]
    if got.shape != expected.shape:
        raise ConversionError(f"{MODEL_NAME}: ONNX gives {got.shape}, PyTorch {expected.shape}")
    diff = float(np.abs(got - expected).max())
    if not diff <= PARITY_TOLERANCE:
        raise ParityError(f"{MODEL_NAME}: ONNX differs from PyTorch by {diff:.3g}")
    return diff


def shipped(repository: Path) -> tuple[Path, str]:
    """The trained version's file in ``repository`` and the sha256 the manifest pins."""
    from kyc_tools.assets.manifest import load_manifest

    spec = load_manifest().trained[MODEL_NAME]
    return repository / MODEL_NAME / str(spec["version"]) / "model.onnx", spec["sha256"]


def check_shipped(repository: Path) -> Path:
    """The shipped trained version's path, when its sha256 is the manifest's; raises
    :class:`ConversionError` otherwise (missing, or another file)."""
    from kyc_tools.assets.fetch import sha256_file

    path, expected = shipped(repository)
    if not path.is_file():
        raise ConversionError(f"{path} is missing: the repository ships it (git checkout)")
    found = sha256_file(path)
    if found != expected:
        raise ConversionError(f"{path} is not the trained model the manifest pins (sha256 "
                              f"{found[:12]}..., pinned {expected[:12]}...): retrain "
                              "with `kyc models mrz-rec train` and update trained.mrz_rec")
    return path
