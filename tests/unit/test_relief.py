"""The relief check on pixels: a real photo's face turned as a solid head (the canonical
mesh), as a flat print, as a sheet curved round a cylinder; the depth template it reads
against; the mesh it comes from."""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest
from PIL import Image

from kyc.face.mesh import MeshError, load_face_mesh
from kyc.liveness.relief import SIDE, FaceView, face_view, relief, shipped_depth
from kyc_tools.assets.fetch import fetch_test_data, fetch_test_photos
from kyc_tools.dev.synthetic.liveness import HeadModel, cylinder_warp, load_mesh

# Five points of a face in a 640 x 480 frame (eyes, nose tip, mouth corners).
FACE = np.array([[280.0, 200.0], [360.0, 200.0], [320.0, 250.0], [290.0, 290.0],
                 [350.0, 290.0]])


@pytest.fixture(scope="module")
def mesh():
    return load_mesh()


@pytest.fixture(scope="module")
def photo():
    """A real photo (person_b_1) with a face at FACE, and the mesh laid on it."""
    image = np.asarray(Image.open(fetch_test_photos()["person_b_1"]).convert("RGB"))
    return cv2.resize(image, (640, 480), interpolation=cv2.INTER_AREA)


def turned_plane(image: np.ndarray, points: np.ndarray, yaw: float):
    """``image`` as a flat sheet turned ``yaw`` degrees about its vertical axis, seen by
    a pinhole camera 1.5 widths away; the face's points where they land."""
    height, width = image.shape[:2]
    focal, distance, angle = float(width), 1.5 * width, math.radians(yaw)

    def land(u: float, v: float) -> tuple[float, float]:
        x, y = (u - width / 2) * distance / focal, (v - height / 2) * distance / focal
        z = distance - x * math.sin(angle)
        return (width / 2 + focal * x * math.cos(angle) / z, height / 2 + focal * y / z)

    corners = np.float32([[0, 0], [width, 0], [width, height], [0, height]])
    matrix = cv2.getPerspectiveTransform(corners, np.float32([land(*c) for c in corners]))
    moved = cv2.perspectiveTransform(points.reshape(-1, 1, 2).astype(np.float32), matrix)
    return cv2.warpPerspective(image, matrix, (width, height)), moved.reshape(5, 2)


def test_the_shipped_depth_template_is_what_the_pinned_mesh_gives(mesh):
    from kyc.liveness.relief import depth_template

    made = depth_template(mesh.vertices, mesh.triangles, mesh.five_points())
    shipped = shipped_depth()
    assert shipped.shape == (SIDE, SIDE) and made.shape == shipped.shape
    np.testing.assert_array_equal(np.isnan(made), np.isnan(shipped))
    np.testing.assert_allclose(np.nan_to_num(made), np.nan_to_num(shipped), atol=0.05)
    # the nose is the nearest point, in the middle of the face
    row, col = np.unravel_index(np.nanargmax(shipped), shipped.shape)
    assert abs(col - SIDE / 2) < SIDE * 0.05 and SIDE * 0.35 < row < SIDE * 0.6


def test_the_canonical_mesh_has_its_vertices_triangles_and_five_points(mesh):
    assert mesh.vertices.shape == (468, 3) and mesh.triangles.shape == (898, 3)
    five = mesh.five_points()
    assert five[0, 0] < five[1, 0] and five[3, 0] < five[4, 0]  # image left first
    assert five[2, 2] == mesh.vertices[:, 2].max()  # the nose tip is nearest the camera
    with pytest.raises(MeshError):
        load_face_mesh(b"\x0a\x02\x08")  # a message with no vertices
    with pytest.raises(MeshError):
        load_face_mesh(b"\xff")


def test_a_face_turned_as_a_solid_head_shows_its_relief_both_ways(photo, mesh):
    head = HeadModel(photo, FACE, mesh)
    base = face_view(photo, FACE)
    for yaw in (30.0, -30.0):
        turned = head.render(yaw)
        points = project(head, yaw)
        assert relief(base, face_view(turned, points), 0, yaw) > 0.3


def project(head: HeadModel, yaw: float) -> np.ndarray:
    """Where the mesh's five points land when the head turns ``yaw`` degrees."""
    from kyc.face.mesh import EYE_CORNERS, MOUTH_CORNERS, NOSE_TIP

    turned = head._turned(yaw, 0.0)
    eyes = [(turned[a] + turned[b]) / 2 for a, b in EYE_CORNERS]
    return np.array([eyes[0][:2], eyes[1][:2], turned[NOSE_TIP, :2],
                     turned[MOUTH_CORNERS[0], :2], turned[MOUTH_CORNERS[1], :2]])


@pytest.mark.parametrize("yaw", [30.0, -40.0])
def test_a_photo_turned_as_a_flat_print_shows_none(photo, yaw):
    sheet, points = turned_plane(photo, FACE, yaw)
    # the turn as a landmark reading would claim it: what the ratio is divided by
    assert abs(relief(face_view(photo, FACE), face_view(sheet, points), 0, yaw / 2)) < 0.08


def test_a_photo_curved_round_a_cylinder_and_turned_shows_none(photo):
    box = (240.0, 140.0, 400.0, 330.0)
    warped = cylinder_warp(photo, box, 30.0)
    # the landmarks move as a head turn's (the warp's purpose): read them off the warp
    centre, reach = 320.0, 0.75 * 160.0
    u = np.clip((FACE[:, 0] - centre) / reach, -1, 1)
    moved = FACE.copy()
    moved[:, 0] = centre + reach * np.sin(np.arcsin(u) + math.radians(30.0))
    assert abs(relief(face_view(photo, FACE), face_view(warped, moved), 0, 20.0)) < 0.08


def test_a_view_is_a_grey_canonical_square_with_the_eyes_level(photo):
    tilted = FACE @ np.array([[math.cos(0.3), -math.sin(0.3)], [math.sin(0.3), math.cos(0.3)]])
    view = face_view(photo, tilted)
    assert view.crop.shape == (SIDE, SIDE) and view.crop.dtype == np.uint8
    assert abs(view.points[0, 1] - view.points[1, 1]) < 1e-6
    assert view.points.min() > 0 and view.points.max() < SIDE


def test_the_mesh_fetch_is_pinned():
    paths = fetch_test_data("face_mesh")
    assert paths["mesh"].stat().st_size == 19376 and "Apache" in paths["NOTICE"].read_text()


def test_a_view_no_flow_can_be_read_from_gives_nan_and_the_session_fails_the_check():
    good = FaceView(np.full((SIDE, SIDE), 128, np.uint8),
                    np.array([[56.0, 60], [104, 60], [80, 85], [62, 110], [98, 110]]))
    for points in (np.full((5, 2), np.nan), np.full((5, 2), 80.0), good.points * 1e6):
        assert math.isnan(relief(good, FaceView(good.crop, points), 0, 20.0))
