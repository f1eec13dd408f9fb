"""Recorded or rendered frames go out at a camera's pace, not as fast as the server answers."""

from __future__ import annotations

import pytest

from kyc_client.liveness import CAMERA_FPS, FramePacer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        self.now += seconds


def test_frames_sent_in_a_burst_are_spaced_one_frame_interval_apart():
    clock = Clock()
    pacer = FramePacer(10.0, clock, clock.sleep)
    for k in range(4):
        pacer.wait(k)
    assert clock.slept == [0.1, 0.1, 0.1]
    assert clock.now == pytest.approx(100.3)


def test_time_spent_making_a_frame_counts_towards_its_interval():
    clock = Clock()
    pacer = FramePacer(10.0, clock, clock.sleep)
    pacer.wait(0)
    clock.now += 0.25  # the app was slower than the camera: no wait for frame 1 or 2
    pacer.wait(1)
    pacer.wait(2)
    pacer.wait(3)
    assert clock.slept == [pytest.approx(0.05)]


def test_no_rate_sends_at_once():
    clock = Clock()
    for fps in (None, 0):
        pacer = FramePacer(fps, clock, clock.sleep)
        for k in range(5):
            pacer.wait(k)
    assert clock.slept == []


def test_a_negative_rate_is_refused():
    with pytest.raises(ValueError, match="fps must be positive"):
        FramePacer(-1.0)


def test_a_film_of_twenty_frames_at_the_default_rate_lasts_the_shipped_minimum_session():
    from kyc.liveness.session import LivenessSettings

    assert LivenessSettings().min_duration_s < 20 / CAMERA_FPS
