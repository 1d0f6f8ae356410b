"""Each camera has its own heartbeat, freeze and skew conditions, counted and named."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vla_edge.inference.camera_health import (
    FROZEN,
    LOST,
    OK,
    SCENE_MOTION,
    SKEWED,
    WAITING,
    CameraHealth,
    CameraHealthLimits,
)

CAMS = ("agentview", "wrist", "side")
LIMITS = CameraHealthLimits(timeout_s=0.5, freeze_s=0.5, max_skew_s=0.3)
PERIOD_S = 0.1


def _img(value: int) -> np.ndarray:
    return np.full((4, 4, 3), value % 256, dtype=np.uint8)


def _stream(health, t0, t1, cameras, joints=None, frozen=(), restamp=True, stamp_offset=None):
    """Frames every PERIOD_S in ``[t0, t1)`` from ``cameras`` (changing pixels unless frozen)."""
    stamp_offset = stamp_offset or {}
    t, k = t0, 0
    while t < t1 - 1e-9:
        if joints is not None:
            health.on_joint_state(joints(t))
        for cam in cameras:
            stamp = t + stamp_offset.get(cam, 0.0)
            if cam in frozen:
                stamp = stamp if restamp else t0 + stamp_offset.get(cam, 0.0)
                health.on_frame(cam, stamp, _img(7), t)
            else:
                health.on_frame(cam, stamp, _img(int(t * 10) + k), t)
        health.update(t)
        t, k = t + PERIOD_S, k + 1
    return t


def test_cameras_wait_then_are_ok_then_lost_after_the_timeout():
    health = CameraHealth(CAMS[:2], CAMS[:2], LIMITS, start_s=0.0)
    assert health.update(0.2) == {"agentview": WAITING, "wrist": WAITING}
    assert health.update(0.6) == {"agentview": LOST, "wrist": LOST}  # never came
    t = _stream(health, 1.0, 2.0, CAMS[:2])
    assert health.update(t) == {"agentview": OK, "wrist": OK}
    assert health.update(t - PERIOD_S + LIMITS.timeout_s) == {"agentview": OK, "wrist": OK}
    assert health.update(t + LIMITS.timeout_s) == {"agentview": LOST, "wrist": LOST}
    assert health.counters()["wrist.lost"] == 2  # the start-up and this one


@settings(max_examples=40, deadline=None)
@given(
    dropped=st.sets(st.sampled_from(CAMS), min_size=1),
    required=st.sets(st.sampled_from(CAMS), min_size=1),
    onset_s=st.floats(0.3, 3.0),
    duration_s=st.floats(0.7, 3.0),
)
def test_any_set_of_dropped_cameras_is_lost_counted_once_and_blocks_only_if_required(
    dropped, required, onset_s, duration_s
):
    health = CameraHealth(CAMS, sorted(required), LIMITS, start_s=0.0)
    t = _stream(health, 0.0, onset_s, CAMS)
    live = [c for c in CAMS if c not in dropped]
    t = _stream(health, t, onset_s + duration_s, live)
    conditions = health.update(t)
    for cam in CAMS:
        assert conditions[cam] == (LOST if cam in dropped else OK)
        assert health.counters()[f"{cam}.lost"] == int(cam in dropped)
    assert set(health.blocking(t)) == dropped & required
    t = _stream(health, t, t + 1.0, CAMS)  # the cameras are back
    assert health.blocking(t) == {}


def test_frames_repeating_their_stamp_are_a_frozen_camera():
    health = CameraHealth(CAMS[:2], CAMS[:2], LIMITS, start_s=0.0)
    t = _stream(health, 0.0, 1.0, CAMS[:2])
    t = _stream(health, t, t + 0.8, CAMS[:2], frozen={"wrist"}, restamp=False)
    assert health.update(t) == {"agentview": OK, "wrist": FROZEN}
    assert health.blocking(t) == {"wrist": FROZEN}


def test_identical_pixels_under_fresh_stamps_are_frozen_once_the_arm_moves():
    health = CameraHealth(CAMS[:2], CAMS[:2], LIMITS, start_s=0.0)
    t = _stream(health, 0.0, 1.0, CAMS[:2], joints=lambda t: np.zeros(7))
    still = _stream(health, t, t + 1.5, CAMS[:2], joints=lambda t: np.zeros(7), frozen={"wrist"})
    assert health.update(still)["wrist"] == OK  # a still scene: nothing proves a freeze

    def moving(s):
        return np.full(7, 0.5 * SCENE_MOTION * (s - still) / PERIOD_S)

    t = _stream(health, still, still + 0.6, CAMS[:2], joints=moving, frozen={"wrist"})
    assert health.update(t) == {"agentview": OK, "wrist": FROZEN}
    assert health.counters()["wrist.frozen"] == 1
    t = _stream(health, t, t + 0.3, CAMS[:2], joints=moving)  # new pixels: recovered
    assert health.update(t)["wrist"] == OK


@pytest.mark.parametrize("offset_s", [-0.45, 0.45], ids=["behind", "ahead"])
def test_stamps_disagreeing_beyond_the_bound_name_the_odd_camera(offset_s):
    health = CameraHealth(CAMS[:2], CAMS[:2], LIMITS, start_s=0.0)
    t = _stream(health, 0.0, 1.0, CAMS[:2])
    t = _stream(health, t, t + 1.0, CAMS[:2], stamp_offset={"wrist": offset_s})
    assert health.update(t - PERIOD_S) == {"agentview": OK, "wrist": SKEWED}
    assert health.counters()["wrist.skewed"] == 1
    assert health.counters()["agentview.skewed"] == 0


def test_a_camera_the_policy_does_not_read_is_monitored_but_never_blocks():
    health = CameraHealth(CAMS[:2], ("agentview",), LIMITS, start_s=0.0)
    t = _stream(health, 0.0, 1.0, CAMS[:2])
    t = _stream(health, t, t + 1.0, ("agentview",))
    assert health.update(t)["wrist"] == LOST
    assert health.blocking(t) == {}
    assert health.diagnostics(t)["camera.wrist.required"] == 0
    assert health.diagnostics(t)["camera.wrist.condition"] == LOST


def test_a_required_camera_must_be_received():
    with pytest.raises(ValueError, match="required cameras"):
        CameraHealth(("agentview",), ("wrist",), LIMITS, start_s=0.0)


def test_rebase_gives_every_camera_one_timeout_on_the_new_clock():
    health = CameraHealth(CAMS[:2], CAMS[:2], LIMITS, start_s=100.0)
    _stream(health, 100.0, 101.0, CAMS[:2])
    health.rebase(90.0)  # the clock stepped 11 s back
    assert health.update(90.2) == {"agentview": WAITING, "wrist": WAITING}
    t = _stream(health, 90.2, 91.0, CAMS[:2])
    assert health.update(t) == {"agentview": OK, "wrist": OK}
    assert health.counters()["wrist.lost"] == 0
