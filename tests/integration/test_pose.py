"""The liveness head pose in degrees of the head: renders of a face turned a known angle
(kyc_tools.dev.eval.pose) read that angle through the shipped calibration
(kyc.face.landmarks.POSE_KNOTS), where the mesh fit alone reads about 0.6 of it."""

from __future__ import annotations

import pytest

from kyc_testing import SHIPPED_REPOSITORY, require_weights

pytestmark = pytest.mark.integration

# four faces of four people (kyc_tools.dev.eval.liveness_samples.SOURCES) and their mirrors
SOURCES = slice(0, 10, 3)
ANGLES = {"yaw": (-20, 20), "pitch": (-20, 20)}


def test_renders_of_known_angles_read_within_three_degrees_and_the_fit_alone_does_not():
    from kyc_tools.dev.eval import pose

    require_weights()
    readings = pose.measure(SHIPPED_REPOSITORY, SOURCES, ANGLES)
    rows = pose.table(pose.shipped(readings))
    assert [(r["measure"], r["angle"], r["renders"]) for r in rows] == [
        (m, a, 8) for m in ("pitch", "yaw") for a in (-20, 20)]
    for row in rows:
        assert abs(row["error_mean"]) <= pose.WITHIN_DEG, row
        assert abs(row["fit_mean"]) <= 0.75 * abs(row["angle"]), row  # uncalibrated
    # each person read through knots fitted on the others' alone
    for row in pose.table(pose.held_out(readings)):
        assert abs(row["error_mean"]) <= 2 * pose.WITHIN_DEG, row
