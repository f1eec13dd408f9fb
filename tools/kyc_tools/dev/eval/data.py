"""Labelled data for ``kyc eval``, read from the user's folders (formats in docs/eval/README.md).

- faces: ``DIR/<person>/<image>``: every image of one folder is one person;
- documents: ``DIR/<name>.<jpg|png|...>`` with ``DIR/<name>.json``: ``{"mrz": [lines],
  "fields": {name: value}}`` (``kind`` optional: td1, td2 or td3; ``"tampered": true``
  where the printed MRZ was altered, which the reader must report not valid);
- liveness: ``DIR/<sample>/`` with frames as image files in name order and
  ``label.json``: ``{"label": "bona_fide" | "attack", "attack": "<type>",
  "challenge": ["left", ...], "fps": 15}``, optionally ``"channel": "presentation" |
  "injection"`` (how an attack reaches the server: media shown to a camera, the
  default, or frames made by software) and ``"source"`` (where the frames come from);
- antifraud: a CSV with the antifraud model's feature columns and ``label`` (1: fraud).

Only counts and file names leave this module's readers for the report; the images and
expected texts stay in memory.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kyc_tools.dev.eval.server import EvalError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp")


def _images(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir()
                  if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def _folder(path: Path, what: str) -> Path:
    if not path.is_dir():
        raise EvalError(f"{path} is not a folder ({what})")
    return path


@dataclass(frozen=True)
class FaceImage:
    person: str
    path: Path

    @property
    def name(self) -> str:
        return f"{self.person}/{self.path.name}"


def read_faces(root: Path) -> list[FaceImage]:
    """Every image of ``root/<person>/``; at least two people and one genuine pair."""
    people = sorted(p for p in _folder(root, "DIR/<person>/<image>").iterdir() if p.is_dir())
    images = [FaceImage(person.name, path) for person in people for path in _images(person)]
    counts = {p.name: sum(1 for i in images if i.person == p.name) for p in people}
    if sum(1 for n in counts.values() if n) < 2 or max(counts.values(), default=0) < 2:
        raise EvalError(f"{root}: faces need DIR/<person>/<image> with at least two people "
                        "and one of them in two images (a genuine pair)")
    return images


@dataclass(frozen=True)
class DocumentSample:
    path: Path
    mrz_lines: tuple[str, ...]
    fields: dict[str, Any]
    kind: str
    tampered: bool = False


def read_documents(root: Path) -> list[DocumentSample]:
    """Every image of ``root`` that has its ``.json`` beside it."""
    samples, orphans = [], []
    for path in _images(_folder(root, "DIR/<name>.jpg with DIR/<name>.json")):
        label = path.with_suffix(".json")
        if not label.is_file():
            orphans.append(path.name)
            continue
        try:
            data = json.loads(label.read_text())
            lines = tuple(str(line) for line in data["mrz"])
            fields = dict(data.get("fields") or {})
        except (ValueError, KeyError, TypeError) as exc:
            raise EvalError(f"{label}: not {{\"mrz\": [lines], \"fields\": {{...}}}} "
                            f"({type(exc).__name__}: {exc})") from None
        kind = data.get("kind") or {3: "td1", 2: "td3"}.get(len(lines), "unknown")
        samples.append(DocumentSample(path, lines, fields, kind, data.get("tampered") is True))
    if not samples:
        raise EvalError(f"{root}: no image with its .json label"
                        + (f" ({len(orphans)} images without one)" if orphans else ""))
    return samples


@dataclass(frozen=True)
class LivenessSample:
    name: str
    label: str  # bona_fide, or the attack's type
    challenge: tuple[str, ...]
    fps: float
    frames: tuple[Path, ...] = field(repr=False)
    channel: str = "presentation"  # an attack's: presentation or injection
    source: str = ""
    person: str = ""  # a bona fide session's: who is filmed
    kinds: tuple[str, ...] = ()  # rows of the report it is counted in besides its label

    @property
    def bona_fide(self) -> bool:
        return self.label == "bona_fide"


def read_liveness(root: Path) -> list[LivenessSample]:
    """Every ``root/<sample>/`` with its ``label.json`` and frames."""
    samples = []
    for folder in sorted(p for p in _folder(root, "DIR/<sample>/").iterdir() if p.is_dir()):
        label_file = folder / "label.json"
        if not label_file.is_file():
            continue
        try:
            data = json.loads(label_file.read_text())
            bona = data["label"] == "bona_fide"
            if not bona and data["label"] != "attack":
                raise ValueError(f"label {data['label']!r} is neither bona_fide nor attack")
            challenge = tuple(str(m) for m in data["challenge"])
            channel = str(data.get("channel") or "presentation")
            if channel not in ("presentation", "injection"):
                raise ValueError(f"channel {channel!r} is neither presentation nor injection")
        except (ValueError, KeyError, TypeError) as exc:
            raise EvalError(f"{label_file}: {exc} (want {{\"label\": \"bona_fide\"|\"attack\", "
                            "\"attack\": TYPE, \"challenge\": [moves], \"fps\": N}})") from None
        frames = tuple(_images(folder))
        if not frames:
            raise EvalError(f"{folder}: no frames")
        samples.append(LivenessSample(folder.name, "bona_fide" if bona else
                                      str(data.get("attack") or "attack"), challenge,
                                      float(data.get("fps") or 15), frames, channel,
                                      str(data.get("source") or ""),
                                      str(data.get("person") or ""),
                                      tuple(str(k) for k in data.get("kinds") or ())))
    if not samples:
        raise EvalError(f"{root}: no DIR/<sample>/label.json")
    return samples


def read_cases(path: Path, features: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Features (float32, in ``features``' order) and labels (0/1) of a labelled CSV."""
    if not path.is_file():
        raise EvalError(f"{path} is not a file (a CSV of the feature columns and label)")
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in (*features, "label") if c not in (reader.fieldnames or [])]
        if missing:
            raise EvalError(f"{path}: missing columns {', '.join(missing)}")
        rows = list(reader)
    try:
        x = np.array([[float(r[c]) for c in features] for r in rows], dtype=np.float32)
        y = np.array([int(float(r["label"])) for r in rows], dtype=np.int64)
    except ValueError as exc:
        raise EvalError(f"{path}: {exc}") from None
    if not len(y) or set(y.tolist()) - {0, 1}:
        raise EvalError(f"{path}: label must be 0 or 1, with at least one case")
    return x, y
