"""Fault scenarios load and validate; each injector corrupts exactly its seam."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vla_edge.core.errors import ConfigError
from vla_edge.core.stop import StopCategory
from vla_edge.core.types import ActionChunk, Observation
from vla_edge.faults.injectors import (
    CameraDelay,
    CameraDrop,
    CameraFreeze,
    CameraStampSkew,
    ChunkNaN,
    ChunkOutOfLimits,
    CpuAffinityCap,
    EStopPress,
    ProcessCrash,
    make_injector,
)
from vla_edge.faults.scenario import FaultScenario, load_all, load_scenario, load_suite

JOINTS = ("joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper")


def scenario(fault: str, params: dict | None = None, **kw) -> FaultScenario:
    data = {
        "name": "t",
        "fault": fault,
        "start_s": 1.0,
        "duration_s": 1.0,
        "params": params or {},
        "expected": {"stop_category": "none"},
    }
    data.update(kw)
    return FaultScenario.model_validate(data)


def frame(stamp_s: float) -> Observation:
    image = np.full((4, 4, 3), int(stamp_s * 10) % 255, dtype=np.uint8)
    return Observation(stamp_s, {"agentview": image}, np.zeros(7), "x")


def chunk(t_obs_s: float = 0.0) -> ActionChunk:
    return ActionChunk(t_obs_s, 0.1, JOINTS, np.zeros((10, 7)))


def test_every_shipped_scenario_validates_and_the_default_suite_lists_them_all():
    scenarios = load_all()
    default = load_suite("default")
    assert {s.name for s in default} == set(scenarios)
    ros = load_suite("ros")
    assert {s.name for s in ros} == {
        "camera_drop",
        "camera_drop_wrist",
        "inference_crash",
        "estop_reset",
        "chunk_nan",
    }
    assert all(s.ros for s in ros)
    for s in default:
        make_injector(s, position_max=[2.9, 1.8, 2.6, 2.9, 2.0, 3.0, 0.04])


def test_scenario_params_are_validated_against_the_fault_type(tmp_path):
    path = tmp_path / "bad_delay.yaml"
    path.write_text(
        "name: bad_delay\nfault: camera_delay\nstart_s: 1.0\nduration_s: 1.0\n"
        "params: {delay_s: -0.2}\nexpected: {stop_category: none}\n"
    )
    with pytest.raises(ConfigError, match="delay_s") as info:
        load_scenario(path)
    assert "-0.2" in str(info.value)


def test_a_stop_without_a_detection_bound_is_rejected():
    with pytest.raises(ValueError, match="max_detect_s"):
        scenario("camera_drop", expected={"stop_category": "cat1"})


def test_a_fault_window_past_the_episode_end_is_rejected():
    with pytest.raises(ValueError, match="episode_s"):
        scenario("camera_drop", start_s=5.0, duration_s=2.0, episode_s=6.0)


def test_unknown_suite_names_the_known_ones():
    with pytest.raises(ConfigError, match="default"):
        load_suite("nope")


def test_expected_response_accepts_the_listed_categories_only():
    s = scenario("camera_drop", expected={"stop_category": "none", "also_accept": ["cat2"]})
    assert s.expected.accepts(StopCategory.CAT2)
    assert not s.expected.accepts(StopCategory.CAT1)


def test_camera_delay_releases_frames_delay_later_with_their_capture_stamp():
    inj = CameraDelay(scenario("camera_delay", {"delay_s": 0.2}))
    assert [f.stamp_s for f in inj.camera(frame(0.9), 0.9)] == [0.9]
    assert inj.camera(frame(1.0), 1.0) == []
    assert inj.camera(frame(1.1), 1.1) == []
    assert [f.stamp_s for f in inj.camera(None, 1.2)] == [1.0]
    assert [f.stamp_s for f in inj.camera(None, 1.3)] == [1.1]
    # after the window, a new frame waits for the queue ahead of it (order kept)
    assert inj.camera(frame(1.9), 1.9) == []
    assert inj.camera(frame(2.0), 2.0) == []
    assert [f.stamp_s for f in inj.camera(None, 2.1)] == [1.9, 2.0]
    assert [f.stamp_s for f in inj.camera(frame(2.2), 2.2)] == [2.2]


def test_camera_freeze_repeats_the_last_good_frame_same_stamp_same_pixels():
    inj = CameraFreeze(scenario("camera_freeze"))
    good = frame(0.9)
    inj.camera(good, 0.9)
    out = inj.camera(frame(1.5), 1.5)
    assert len(out) == 1 and out[0].stamp_s == 0.9
    assert np.array_equal(out[0].images["agentview"], good.images["agentview"])
    assert inj.camera(frame(2.1), 2.1)[0].stamp_s == 2.1


def test_camera_freeze_with_restamp_repeats_the_pixels_under_fresh_stamps():
    inj = CameraFreeze(scenario("camera_freeze", {"restamp": True}))
    good = frame(0.9)
    inj.camera(good, 0.9)
    out = inj.camera(frame(1.5), 1.5)
    assert len(out) == 1 and out[0].stamp_s == 1.5
    assert np.array_equal(out[0].images["agentview"], good.images["agentview"])


def test_camera_stamp_skew_moves_the_named_cameras_stamps_inside_the_window_only():
    inj = CameraStampSkew(
        scenario("camera_stamp_skew", {"cameras": ["agentview"], "offset_s": -0.4})
    )
    assert inj.camera(frame(0.9), 0.9)[0].stamp_s == 0.9
    assert inj.camera(frame(1.5), 1.5)[0].stamp_s == pytest.approx(1.1)
    assert inj.camera(frame(2.1), 2.1)[0].stamp_s == 2.1
    other = CameraStampSkew(scenario("camera_stamp_skew", {"cameras": ["wrist"], "offset_s": 0.4}))
    assert other.camera(frame(1.5), 1.5)[0].stamp_s == 1.5
    with pytest.raises(ValueError, match="offset_s"):
        scenario("camera_stamp_skew", {"offset_s": 0.0})


def test_camera_drop_delivers_nothing_during_the_window_only():
    inj = CameraDrop(scenario("camera_drop"))
    assert inj.camera(frame(1.5), 1.5) == []
    assert len(inj.camera(frame(2.5), 2.5)) == 1


def test_camera_faults_leave_other_cameras_alone():
    inj = CameraDrop(scenario("camera_drop", {"cameras": ["wrist"]}))
    assert len(inj.camera(frame(1.5), 1.5)) == 1


def test_joint_state_loss_drops_states_during_the_window():
    inj = make_injector(scenario("joint_state_loss"))
    assert inj.joint_state(np.zeros(7), 1.2) is None
    assert inj.joint_state(np.zeros(7), 0.5) is not None


def test_chunk_nan_corrupts_from_first_step_on_one_joint_without_touching_the_input():
    inj = ChunkNaN(scenario("chunk_nan", {"joint_index": 2, "first_step": 4}))
    original = chunk(1.2)
    bad = inj.chunk(original, 1.2)
    assert bad is not None
    assert np.all(np.isnan(bad.positions[4:, 2]))
    assert np.all(np.isfinite(bad.positions[:4]))
    assert np.all(np.isfinite(np.delete(bad.positions, 2, axis=1)))
    assert np.all(np.isfinite(original.positions))


def test_chunk_out_of_limits_targets_beyond_position_max():
    inj = ChunkOutOfLimits(
        scenario("chunk_out_of_limits", {"joint_index": 1, "beyond_limit": 0.5}),
        position_max=[2.9, 1.8, 2.6, 2.9, 2.0, 3.0, 0.04],
    )
    bad = inj.chunk(chunk(1.5), 1.5)
    assert bad is not None and np.allclose(bad.positions[:, 1], 2.3)


def test_out_of_limits_without_limits_is_a_named_error():
    with pytest.raises(ConfigError, match="position_max"):
        make_injector(scenario("chunk_out_of_limits", {"beyond_limit": 0.5}))


def test_stamp_shift_moves_t_obs_only():
    inj = make_injector(scenario("chunk_stamp_shift", {"offset_s": -1000.0}))
    out = inj.chunk(chunk(1.5), 1.5)
    assert out is not None and out.t_obs_s == pytest.approx(-998.5)


def test_slowdown_scales_the_inference_delay_inside_the_window():
    inj = make_injector(scenario("inference_slowdown", {"factor": 4.0}))
    assert inj.inference_delay_s(0.1, 1.5) == pytest.approx(0.4)
    assert inj.inference_delay_s(0.1, 2.5) == pytest.approx(0.1)


def test_crash_kills_only_the_named_process_and_respawns_it_after_the_window():
    inj = ProcessCrash(scenario("inference_crash", {"respawn": True}), "inference")
    assert not inj.alive("inference", 1.5)
    assert inj.alive("controller", 1.5)
    assert inj.alive("inference", 2.5)
    forever = ProcessCrash(scenario("controller_crash", {"respawn": False}), "controller")
    assert not forever.alive("controller", 100.0)


def test_clock_jump_stays_stepped_after_the_window():
    inj = make_injector(scenario("clock_jump", {"offset_s": 2.0}))
    assert inj.clock_offset_s(0.5) == 0.0
    assert inj.clock_offset_s(1.0) == 2.0
    assert inj.clock_offset_s(10.0) == 2.0


def test_estop_is_held_for_the_window_and_released_for_the_reset():
    inj = EStopPress(scenario("estop", {"reset": True}))
    assert [inj.estop_pressed(t) for t in (0.5, 1.0, 1.9, 2.0)] == [False, True, True, False]


def test_cpu_cap_pins_the_calling_thread_and_restores_it():
    inj = CpuAffinityCap(scenario("cpu_cap", {"cpus": 1}))
    reason = inj.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    import os

    before = os.sched_getaffinity(0)
    with inj.pinned(1.5) as capped:
        assert capped
        assert len(os.sched_getaffinity(0)) == 1
    assert os.sched_getaffinity(0) == before
    with inj.pinned(0.5) as capped:
        assert not capped


def test_cpu_cap_slowdown_is_the_measured_wall_time_ratio():
    inj = CpuAffinityCap(scenario("cpu_cap", {"cpus": 1}))
    assert inj.slowdown == 1.0
    inj.record_wall_s(0.01, capped=False)
    inj.record_wall_s(0.03, capped=True)
    assert math.isclose(inj.slowdown, 3.0)
    assert inj.inference_delay_s(0.1, 1.5) == pytest.approx(0.3)


@settings(max_examples=60, deadline=None)
@given(
    delay_s=st.floats(0.01, 1.0),
    start_s=st.floats(0.0, 2.0),
    duration_s=st.floats(0.05, 2.0),
    period_s=st.sampled_from([0.02, 0.05, 0.1]),
)
def test_camera_delay_delivers_every_frame_once_in_order_and_never_early(
    delay_s, start_s, duration_s, period_s
):
    inj = CameraDelay(
        scenario("camera_delay", {"delay_s": delay_s}, start_s=start_s, duration_s=duration_s)
    )
    captured, delivered = [], []
    tick_s = 0.01
    for k in range(int(6.0 / tick_s)):
        t = k * tick_s
        f = None
        if k % int(round(period_s / tick_s)) == 0:
            f = frame(t)
            captured.append(t)
        for out in inj.camera(f, t):
            delivered.append((t, out.stamp_s))
    stamps = [s for _, s in delivered]
    assert stamps == sorted(stamps)
    assert len(stamps) == len(set(stamps))
    late = [s for s in captured if s < 6.0 - delay_s - 2 * tick_s]
    assert set(late) <= set(stamps)
    for t, s in delivered:
        if start_s <= s < start_s + duration_s:
            assert t >= s + delay_s - 1e-6
