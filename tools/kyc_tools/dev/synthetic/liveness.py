"""Liveness frames made by software from ONE real photo: the demo, the tests, the bench.

NOT video of a live person, and NOT a presentation to a camera: frames made by
software are an injection (SECURITY.md). Two renderers:

- :class:`HeadModel`, a 3-D head turn: the photo's face laid on MediaPipe's
  canonical face mesh (a mean human face, Apache-2.0: kyc.face.mesh) by the
  similarity that maps the mesh's five points onto the photo's landmarks, turned
  about a pivot behind the face and projected back; pixels off the mesh (hair, ears,
  neck) follow the face's displacement, fading with distance. It has a face's relief,
  so the relief check (kyc.liveness.relief) passes it, as it passes any render of a
  3-D face: that is the point of the demo, and the limit said in SECURITY.md.
- :func:`cylinder_warp`, the single-photo warp this project's demo used before:
  the face region mapped onto a vertical cylinder and turned. Its landmarks move as
  a head turn's do, its pixels as a curved sheet's: an attack species of
  ``kyc eval liveness`` now (``photo_warp``), which the relief check stops.

Frames also differ by JPEG quality and a small shift, so no two are identical.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

import cv2
import numpy as np
from PIL import Image

from kyc.face.mesh import FaceMesh, load_face_mesh
from kyc.liveness.challenge import MOVES, PITCH, YAW

# How far the rendered person moves on each head-pose measure, by direction, degrees:
# head_pose reads about two thirds of a rendered turn (measured on the test photos: 40
# reads 28-29; a tilt down least). Any move declared on these measures renders.
RENDER_DEG = {(YAW.name, +1): 40.0, (YAW.name, -1): 40.0,
              (PITCH.name, +1): 35.0, (PITCH.name, -1): 45.0}
# The pivot of a head turn, behind the nose tip: the neck, about 10 cm back; the
# mesh's origin is about 7.6 cm behind its nose tip.
PIVOT_Z_CM = -2.5


def load_mesh() -> FaceMesh:
    """The canonical face mesh, fetched (pinned, sha256-checked) into the cache."""
    from kyc_tools.assets.fetch import fetch_test_data

    return load_face_mesh(fetch_test_data("face_mesh")["mesh"].read_bytes())


def move_pose(move: str | None) -> tuple[float, float]:
    """The (yaw, pitch) a rendered person takes for ``move`` (None: facing): the move's
    declared direction on its measure (kyc.liveness.challenge.MOVES), as far as
    :data:`RENDER_DEG` says. A move on a measure other than the head pose's is not
    rendered (ValueError)."""
    if move is None:
        return (0.0, 0.0)
    spec = MOVES[move]
    amount = RENDER_DEG.get((spec.measure.name, spec.sign))
    if amount is None:
        raise ValueError(f"move {move!r} is made on {spec.measure.name!r}: the head renderer "
                         f"renders moves of the head pose ({YAW.name}, {PITCH.name}) only")
    pose = {YAW.name: 0.0, PITCH.name: 0.0, spec.measure.name: spec.sign * amount}
    return (pose[YAW.name], pose[PITCH.name])


def _similarity(source: np.ndarray, target: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Scale, rotation and shift taking 2-D ``source`` points onto ``target`` (least
    squares, Umeyama)."""
    mu_s, mu_t = source.mean(axis=0), target.mean(axis=0)
    s, t = source - mu_s, target - mu_t
    u, sigma, vt = np.linalg.svd(t.T @ s)
    d = np.diag([1.0, float(np.sign(np.linalg.det(u @ vt)))])
    rotation = u @ d @ vt
    scale = float(np.trace(np.diag(sigma) @ d) / (s ** 2).sum())
    return scale, rotation, mu_t - scale * rotation @ mu_s


class HeadModel:
    """One photo's face on the canonical mesh, to render turned (see the module)."""

    def __init__(self, image: np.ndarray, landmarks: Sequence[Sequence[float]],
                 mesh: FaceMesh | None = None) -> None:
        from kyc.face.quality import head_pose

        self.image = np.ascontiguousarray(image)
        mesh = mesh or load_mesh()
        points = np.asarray(landmarks, np.float64).reshape(5, 2)
        # The mesh turned as the photo's face is (a photo is seldom quite frontal), so
        # that a render's turn is relative to the pose the photo shows.
        yaw, pitch, _ = head_pose(points)
        # (pitch as head_pose reads the mesh's own projection: measured, this sign
        # makes every test photo read each move)
        vertices = _rotate(mesh.vertices, float(np.clip(yaw, -30, 30)),
                           float(np.clip(pitch, -20, 20)))
        five = FaceMesh(vertices, mesh.triangles).five_points()
        flip = np.array([1.0, -1.0])  # mesh y up -> image y down
        scale, rotation, shift = _similarity(five[:, :2] * flip, points)
        flat = (vertices[:, :2] * flip) @ (scale * rotation).T + shift
        self.points = np.hstack([flat, vertices[:, 2:3] * scale])  # z to the camera
        self.triangles = mesh.triangles
        self.pivot = np.array([*(five[:, :2] * flip).mean(axis=0) @ (scale * rotation).T
                               + shift, PIVOT_Z_CM * scale])
        self.face_width = float(np.ptp(flat[:, 0]))
        self._cache: dict[tuple[float, float], np.ndarray] = {}

    def render(self, yaw: float, pitch: float = 0.0) -> np.ndarray:
        """The photo with the face turned ``yaw`` and tilted ``pitch`` degrees (signs as
        kyc.face.quality.head_pose reports them); cached per pose."""
        key = (round(yaw, 3), round(pitch, 3))
        if key not in self._cache:
            self._cache[key] = self._render(*key) if key != (0.0, 0.0) else self.image
        return self._cache[key]

    def _turned(self, yaw: float, pitch: float) -> np.ndarray:
        return _rotate(self.points - self.pivot, yaw, pitch) + self.pivot

    def _render(self, yaw: float, pitch: float) -> np.ndarray:
        height, width = self.image.shape[:2]
        turned = self._turned(yaw, pitch)
        source = np.full((height, width, 2), np.nan, np.float32)
        depth = np.full((height, width), -np.inf)
        for tri in self.triangles:
            _raster_map(source, depth, turned[tri], self.points[tri, :2])
        inside = np.isfinite(source[..., 0])
        grid = np.stack(np.meshgrid(np.arange(width), np.arange(height)), axis=-1)
        shift = np.where(inside[..., None], source - grid, 0.0).astype(np.float32)
        # Off the mesh, each pixel takes the displacement of the nearest pixel on it,
        # fading to none a face's width away: hair, ears and the cheek's rim go with the
        # head, the far background stays.
        outside = (~inside).astype(np.uint8)
        distance, labels = cv2.distanceTransformWithLabels(
            outside, cv2.DIST_L2, 5, labelType=cv2.DIST_LABEL_PIXEL)
        on_mesh = np.argwhere(outside == 0)  # labels number the zero pixels in this order
        if len(on_mesh):
            nearest = on_mesh[np.clip(labels - 1, 0, len(on_mesh) - 1)]
            spread = shift[nearest[..., 0], nearest[..., 1]]
            fade = np.clip(1.0 - distance / max(self.face_width, 1.0), 0.0, 1.0)[..., None]
            shift = np.where(inside[..., None], shift, spread * fade)
        maps = (grid + shift).astype(np.float32)
        return cv2.remap(self.image, maps[..., 0], maps[..., 1], cv2.INTER_LINEAR,
                         borderMode=cv2.BORDER_REFLECT)


def _rotate(points: np.ndarray, yaw: float, pitch: float) -> np.ndarray:
    """``points`` (x right, z to the camera; y up for the mesh, down for an image: the
    pitch sign follows) turned ``yaw`` about the vertical axis, then ``pitch``."""
    a, b = math.radians(yaw), math.radians(pitch)
    ry = np.array([[math.cos(a), 0, math.sin(a)], [0, 1, 0], [-math.sin(a), 0, math.cos(a)]])
    rx = np.array([[1, 0, 0], [0, math.cos(b), -math.sin(b)], [0, math.sin(b), math.cos(b)]])
    return points @ (rx @ ry).T


def _raster_map(source: np.ndarray, depth: np.ndarray, turned: np.ndarray,
                original: np.ndarray) -> None:
    """One front-facing triangle of the turned mesh: for each pixel it covers (and no
    nearer triangle does), where in the photo that point of the face was."""
    corners = turned[:, :2]
    area = np.cross(corners[1] - corners[0], corners[2] - corners[0])
    if abs(area) < 1e-9:
        return
    was = np.cross(original[1] - original[0], original[2] - original[0])
    if area * was <= 0:  # turned away from the camera
        return
    height, width = depth.shape
    low = np.maximum(np.floor(corners.min(axis=0)).astype(int), 0)
    high = np.minimum(np.ceil(corners.max(axis=0)).astype(int), [width - 1, height - 1])
    if np.any(high < low):
        return
    ys, xs = np.mgrid[low[1]:high[1] + 1, low[0]:high[0] + 1]
    basis = np.array([corners[0] - corners[2], corners[1] - corners[2]]).T
    w = np.linalg.solve(basis, np.stack([xs.ravel() - corners[2, 0], ys.ravel() - corners[2, 1]]))
    w3 = 1 - w[0] - w[1]
    keep = (w[0] >= -1e-6) & (w[1] >= -1e-6) & (w3 >= -1e-6)
    z = w[0] * turned[0, 2] + w[1] * turned[1, 2] + w3 * turned[2, 2]
    rows, cols = ys.ravel()[keep], xs.ravel()[keep]
    nearer = z[keep] > depth[rows, cols]
    rows, cols = rows[nearer], cols[nearer]
    depth[rows, cols] = z[keep][nearer]
    src = (w[0][keep][nearer, None] * original[0] + w[1][keep][nearer, None] * original[1]
           + w3[keep][nearer, None] * original[2])
    source[rows, cols] = src


def cylinder_warp(image: np.ndarray, box: Sequence[float], yaw_deg: float,
                  radius: float = 0.75) -> np.ndarray:
    """``image`` (RGB uint8) with the face in ``box`` (x1, y1, x2, y2) mapped onto a
    vertical cylinder (``radius`` of the box width, axis through its centre) turned by
    ``yaw_deg``: points near the face's midline (nose) move further sideways than
    points near its edge, so the five landmarks move as in a head turn (a 30-degree
    warp reads as 16 to 24 degrees of yaw) while the pixels move as a curved sheet."""
    height, width = image.shape[:2]
    x1, _, x2, _ = (float(v) for v in box)
    centre, reach = (x1 + x2) / 2, (x2 - x1) * radius
    xs = np.arange(width, dtype=np.float64)
    u = np.clip((xs - centre) / reach, -1.0, 1.0)
    # The output column at angle phi shows what was at angle phi - yaw.
    source = np.sin(np.clip(np.arcsin(u) - math.radians(yaw_deg), -math.pi / 2, math.pi / 2))
    map_x = np.where(np.abs(xs - centre) < reach, centre + source * reach, xs)
    map_x = np.broadcast_to(map_x.astype(np.float32), (height, width))
    map_y = np.broadcast_to(np.arange(height, dtype=np.float32)[:, None], (height, width))
    return cv2.remap(image, np.ascontiguousarray(map_x), np.ascontiguousarray(map_y),
                     cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)


def encode(image: np.ndarray, quality: int, shift: int = 0) -> bytes:
    """JPEG bytes of ``image`` moved ``shift`` pixels right (edge repeated)."""
    if shift:
        image = np.concatenate([np.repeat(image[:, :1], shift, axis=1), image[:, :-shift]],
                               axis=1)
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def frame_variant(k: int) -> tuple[int, int]:
    """(JPEG quality, pixel shift) of frame ``k``: consecutive frames differ, like a camera's."""
    return 88 + k % 8, k % 3


# A move as a person makes it, in frames: on the way, held, on the way back, facing.
RAMP = (0.5,)
HOLD = 3
REST = 3


def move_poses(move: str | None) -> list[tuple[float, float]]:
    """The (yaw, pitch) of each frame of ``move`` (None: :data:`REST` frames facing)."""
    if move is None:
        return [(0.0, 0.0)] * REST
    yaw, pitch = move_pose(move)
    out = [(yaw * f, pitch * f) for f in RAMP] + [(yaw, pitch)] * HOLD
    return out + [(yaw * f, pitch * f) for f in reversed(RAMP)] + [(0.0, 0.0)] * REST


def challenge_poses(moves: Sequence[str]) -> list[tuple[float, float]]:
    """Every frame's pose of a film of ``moves``: facing, then each move in turn."""
    poses = move_poses(None)
    for move in moves:
        poses += move_poses(move)
    return poses


class Performer:
    """Frames of a person making each move asked of them, rendered from one photo:
    ``performer(move)`` for a move, ``performer(None)`` for frames facing the camera
    (what :func:`kyc_client.liveness.perform_session` asks for as moves are told)."""

    def __init__(self, head: HeadModel) -> None:
        self.head = head
        self.sent = 0

    def __call__(self, move: str | None) -> list[bytes]:
        frames = []
        for yaw, pitch in move_poses(move):
            quality, shift = frame_variant(self.sent)
            frames.append(encode(self.head.render(yaw, pitch), quality=quality, shift=shift))
            self.sent += 1
        return frames


def turn_sequence(head: HeadModel, moves: Sequence[str]) -> list[bytes]:
    """The frames of ``moves`` made one after the other (a recording of them)."""
    perform = Performer(head)
    frames = perform(None)
    for move in moves:
        frames += perform(move)
    return frames
