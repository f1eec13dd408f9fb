"""kyc.face.landmarks: the region cut for the landmark model and the pose fitted to
its points, on the canonical face projected at known poses."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kyc.face.landmarks import POSE_KNOTS, SIDE, calibrated, canonical_face, mesh_pose, roi
from kyc.face.quality import head_pose


def rotated(yaw: float, pitch: float, roll: float = 0.0) -> np.ndarray:
    """The canonical face turned: yaw > 0 brings the nose to the image's right, pitch > 0
    up, roll > 0 clockwise in the image (kyc.face.quality.head_pose's signs)."""
    y, p, r = (math.radians(a) for a in (yaw, pitch, roll))
    turn = np.array([[math.cos(y), 0, math.sin(y)], [0, 1, 0], [-math.sin(y), 0, math.cos(y)]])
    tilt = np.array([[1, 0, 0], [0, math.cos(p), math.sin(p)], [0, -math.sin(p), math.cos(p)]])
    spin = np.array([[math.cos(r), math.sin(r), 0], [-math.sin(r), math.cos(r), 0], [0, 0, 1]])
    return canonical_face() @ (turn @ tilt @ spin).T  # roll, then pitch, then yaw


def projected(points: np.ndarray, width: int = 640, height: int = 480) -> np.ndarray:
    """Into a frame, face 12 cm wide in 200 pixels, y down (weak perspective)."""
    scale = 200 / 12
    return np.column_stack([width / 2 + points[:, 0] * scale, height / 2 - points[:, 1] * scale])


@pytest.mark.parametrize("pose", [(0, 0, 0), (20, 0, 0), (-25, 0, 0), (0, 15, 0), (0, -20, 0),
                                  (15, 10, 5), (-10, -10, -8)])
def test_the_pose_of_the_canonical_face_is_read_back_with_head_pose_signs(pose):
    got = mesh_pose(projected(rotated(*pose)), 640, 480)
    assert np.allclose(got, pose, atol=1.0), got


def test_the_signs_agree_with_the_five_point_pose():
    five = [list(ids) for ids in ((33, 133), (362, 263), (4,), (61,), (291,))]
    for pose in ((20, 0, 0), (0, 15, 0), (0, 0, 10)):
        points = projected(rotated(*pose))
        five_pose = head_pose(np.array([points[ids].mean(axis=0) for ids in five]))
        mesh = mesh_pose(points, 640, 480)
        k = int(np.argmax(np.abs(pose)))
        assert np.sign(five_pose[k]) == np.sign(mesh[k]) == np.sign(pose[k])


def test_points_that_are_no_face_give_no_pose():
    assert all(math.isnan(a) for a in mesh_pose(np.full((468, 2), np.nan), 640, 480))
    assert all(math.isnan(a) for a in mesh_pose(np.zeros((5, 2)), 640, 480))


def test_the_region_is_upright_about_the_face_and_maps_back():
    five = np.array([[100, 100], [140, 90], [122, 120], [108, 142], [140, 134]], float)
    region = roi(five)
    crop_of = lambda p: p @ region.matrix[:, :2].T + region.matrix[:, 2]  # noqa: E731
    eyes, mouth = crop_of(five[:2]), crop_of(five[3:])
    assert abs(eyes[0, 1] - eyes[1, 1]) < 1e-9  # the eye line is level in the crop
    middle = (eyes.mean(axis=0) + mouth.mean(axis=0)) / 2
    assert np.allclose(middle, [SIDE / 2, SIDE / 2])
    assert np.allclose(region.to_image(crop_of(five)), five)
    pixels = np.zeros((240, 320, 3), np.uint8)
    assert region.cut(pixels).shape == (SIDE, SIDE, 3)


def test_the_calibration_goes_through_its_knots_keeps_signs_and_extends_past_the_last():
    for k, measure in enumerate(("yaw", "pitch")):
        knots = POSE_KNOTS[measure]
        reads = [r for r, _ in knots]
        assert reads == sorted(reads) and (0.0, 0.0) in knots
        for read, degrees in knots:
            assert calibrated(*((read, 0.0) if k == 0 else (0.0, read)))[k] == \
                pytest.approx(degrees)
            assert abs(degrees) >= abs(read)  # the fit reads less than the head turns
        (r1, d1), (r2, d2) = knots[-2:]
        past = r2 + 5.0
        assert calibrated(*((past, 0.0) if k == 0 else (0.0, past)))[k] == \
            pytest.approx(d2 + 5.0 * (d2 - d1) / (r2 - r1))
    assert calibrated(3.0, -3.0)[0] > 3.0 and calibrated(3.0, -3.0)[1] < -3.0
