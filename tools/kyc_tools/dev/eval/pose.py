"""``kyc eval pose``: how many degrees the liveness head pose reads for a head turned a
known angle, before and after its calibration (kyc.face.landmarks.POSE_KNOTS), the
knots fitted on every person's renders and checked on each person's with knots fitted
on the others' (:func:`held_out`).

Renders of known angles: each source still of ``kyc eval liveness``'s attacks (six
test photos, four stills of real clips) and its mirror image, laid on the canonical
face mesh and turned (kyc_tools.dev.synthetic.liveness.HeadModel: the mesh's pixels move
exactly as the turned mesh projects) by each angle of :data:`FIT`, alone on yaw or
on pitch. Each render is read as the liveness step reads a frame (face_preprocess's
five landmarks, the region, ``face_landmarks``' 468 points, the mesh fit) relative to
the same source unturned: a session's moves are offsets from its own baseline.

The fit reads about 0.6 of a rendered turn (measured 2026-11-28: 20 degrees of yaw
read 12-13), and dlib's 68 landmarks (an independent model) read 0.72 of it: both
landmark models draw a turned face back towards the frontal mean shape they learnt.
:func:`fit` turns the mean readings into the knots the server interpolates.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Known angles, degrees, on one measure at a time (signs as the measures read them):
# the knots are fitted on FIT's, out to FIT_UP_TO (past 30 degrees the landmark model
# saturates: 40 reads 19-21, against 17 for 30); BETWEEN's check the interpolation.
FIT = {"yaw": (-40, -30, -20, -10, 10, 20, 30, 40), "pitch": (-30, -20, -10, 10, 20, 30)}
FIT_UP_TO = 30
BETWEEN = {"yaw": (-25, -15, 15, 25), "pitch": (-25, -15, 15, 25)}
WITHIN_DEG = 3.0  # the goal: a known angle's mean reading within this, after calibration


@dataclass(frozen=True)
class Reading:
    source: str
    measure: str  # "yaw" or "pitch"
    angle: float  # as rendered
    fit: float  # the mesh fit's reading, minus the unturned render's


class PoseReader:
    """The raw mesh-fit pose of one image, as the liveness step reads a frame, run in
    this process over a repository's ``face_preprocess`` and ``face_landmarks``."""

    def __init__(self, repository: Path) -> None:
        from kyc_tools.dev.eval.liveness_samples import _Faces, in_process

        self.local = in_process(repository)
        self.faces = _Faces(self.local)

    def landmarks(self, image: np.ndarray) -> np.ndarray | None:
        try:
            return self.faces(image)[1]
        except RuntimeError:  # no face found
            return None

    def __call__(self, image: np.ndarray) -> tuple[float, float] | None:
        from kyc.face.landmarks import mesh_pose, roi

        five = self.landmarks(image)
        if five is None:
            return None
        region = roi(five)
        out = self.local.infer("face_landmarks", {"FACE": region.cut(image)[None]},
                               ["MESH", "PRESENCE"])
        yaw, pitch, _ = mesh_pose(region.to_image(out["MESH"][0]), image.shape[1],
                                  image.shape[0])
        return (yaw, pitch)


EVERY = slice(None)


def measure(repository: Path, sources: slice = EVERY,
            angles: dict[str, Sequence[int]] = FIT) -> list[Reading]:
    """The readings of renders of each known angle of ``angles`` of the ``sources`` (of
    kyc_tools.dev.eval.liveness_samples.SOURCES) and their mirror images."""
    from kyc_tools.dev.eval.liveness_samples import _sources
    from kyc_tools.dev.synthetic.liveness import HeadModel, load_mesh

    read, mesh = PoseReader(repository), load_mesh()
    out: list[Reading] = []
    for name, image in _sources()[sources]:
        for side, shown in ((name, image), (f"{name} mirrored", np.ascontiguousarray(
                image[:, ::-1]))):
            five = read.landmarks(shown)
            base = read(shown) if five is not None else None
            if base is None:
                continue
            head = HeadModel(shown, five, mesh)
            for k, (axis, values) in enumerate(angles.items()):
                for angle in values:
                    seen = read(head.render(*((angle, 0.0) if k == 0 else (0.0, angle))))
                    if seen is not None:
                        out.append(Reading(side, axis, angle, seen[k] - base[k]))
    return out


def fit(readings: Iterable[Reading]) -> dict[str, tuple[tuple[float, float], ...]]:
    """Knots (mean fit reading, degrees) per measure, through (0, 0), in order, of the
    angles out to :data:`FIT_UP_TO`."""
    means = _means(readings)
    knots = {}
    for axis in FIT:
        points = [(round(float(np.mean(v)), 1), float(a)) for (m, a), v in means.items()
                  if m == axis and abs(a) <= FIT_UP_TO]
        knots[axis] = tuple(sorted([(0.0, 0.0), *points]))
    return knots


def _means(readings: Iterable[Reading]) -> dict[tuple[str, float], list[float]]:
    grouped: dict[tuple[str, float], list[float]] = defaultdict(list)
    for r in readings:
        grouped[(r.measure, r.angle)].append(r.fit)
    return grouped


def person(reading: Reading) -> str:
    """Whose face a reading's source is (a mirror image is the same person's)."""
    from kyc_tools.dev.eval.liveness_samples import PERSON

    name = reading.source.removesuffix(" mirrored")
    return PERSON.get(name, name)


def held_out(readings: Sequence[Reading]) -> list[tuple[Reading, float]]:
    """Each reading in degrees through knots fitted on every other person's."""
    from kyc.face.landmarks import through

    out = []
    for who in sorted({person(r) for r in readings}):
        knots = fit(r for r in readings if person(r) != who)
        out += [(r, through(knots[r.measure], r.fit)) for r in readings if person(r) == who]
    return out


def shipped(readings: Sequence[Reading]) -> list[tuple[Reading, float]]:
    """Each reading in degrees through the shipped knots (kyc.face.landmarks)."""
    from kyc.face.landmarks import degrees

    return [(r, degrees(r.measure, r.fit)) for r in readings]


def table(read: Sequence[tuple[Reading, float]]) -> list[dict]:
    """Per known angle: renders, the mean fit reading, and the mean and spread of the
    degrees ``read``."""
    rows = []
    grouped: dict[tuple[str, float], list[tuple[float, float]]] = defaultdict(list)
    for r, degrees in read:
        grouped[(r.measure, r.angle)].append((r.fit, degrees))
    for (axis, angle), pairs in sorted(grouped.items()):
        fits, degrees = np.array(pairs).T
        rows.append({"measure": axis, "angle": angle, "renders": len(fits),
                     "fit_mean": round(float(fits.mean()), 1),
                     "degrees_mean": round(float(degrees.mean()), 1),
                     "error_mean": round(float(degrees.mean() - angle), 1),
                     "error_p90": round(float(np.percentile(np.abs(degrees - angle), 90)), 1)})
    return rows
