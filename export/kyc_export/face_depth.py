"""``kyc models face-depth``: the relief check's depth template and the canonical face the
head pose is fitted to, both made from the pinned mesh.

``backends/kyc/liveness/face_depth.npy`` is MediaPipe's canonical face mesh (the
manifest's ``face_mesh``, Apache-2.0) rasterised in the relief check's canonical square
(:func:`kyc.liveness.relief.depth_template`), stored as float16 (34 KB against the
mesh's 19 KB: the serving path reads an array, and never fetches anything). It is made
here and checked here (``--check``; tests/unit/test_relief.py does the same), so that
what ships is what the pinned source gives.

``backends/kyc/face/canonical_face.npy`` is the same mesh's 468 vertices, float32
(5.7 KB), that :func:`kyc.face.landmarks.mesh_pose` fits the face_landmarks model's
points to; made and checked beside the template.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np

from kyc.face.landmarks import MESH_FILE
from kyc.face.mesh import load_face_mesh
from kyc.liveness.relief import DEPTH_FILE, depth_template
from kyc_tools.assets.fetch import fetch_test_data

from .errors import ValidationError


def shipped_path() -> Path:
    return Path(str(resources.files("kyc.liveness").joinpath(DEPTH_FILE)))


def shipped_face_path() -> Path:
    return Path(str(resources.files("kyc.face").joinpath(MESH_FILE)))


def _mesh():
    return load_face_mesh(fetch_test_data("face_mesh")["mesh"].read_bytes())


def make_template() -> np.ndarray:
    """The template, float16, from the pinned and checked canonical mesh."""
    mesh = _mesh()
    return depth_template(mesh.vertices, mesh.triangles, mesh.five_points()).astype(np.float16)


def make_face() -> np.ndarray:
    """The canonical face's vertices, float32 [468, 3]."""
    return _mesh().vertices.astype(np.float32)


def write(out: Path | None = None) -> Path:
    """Write the template (to ``out`` when given) and the canonical face."""
    target = out or shipped_path()
    np.save(target, make_template())
    if out is None:
        np.save(shipped_face_path(), make_face())
    return target


def check_face(path: Path | None = None) -> None:
    """Raise unless ``path`` (default: the shipped file) holds the pinned mesh's vertices."""
    target = path or shipped_face_path()
    if not np.array_equal(np.load(target), make_face()):
        raise ValidationError(f"{target} is not the pinned face mesh's vertices: "
                              "run kyc models face-depth")


def check(path: Path | None = None) -> None:
    """Raise unless ``path`` (default: the shipped file) is what the mesh gives."""
    target = path or shipped_path()
    made, shipped = make_template(), np.load(target)
    if shipped.shape != made.shape or not np.array_equal(np.isnan(made), np.isnan(shipped)) \
            or not np.allclose(np.nan_to_num(made), np.nan_to_num(shipped), atol=1e-3):
        raise ValidationError(f"{target} is not the template the pinned face mesh gives: "
                              "run kyc models face-depth")
