"""Arrival rules of the controller: each rejection has its named error and counter."""

import numpy as np
import pytest

from vla_edge.config import ControllerConfig
from vla_edge.control import Controller
from vla_edge.core import (
    ActionChunk,
    EmptyChunkError,
    FutureChunkError,
    JointMismatchError,
    NonFiniteChunkError,
    NonMonotonicChunkError,
    OutOfOrderChunkError,
    StaleChunkError,
)

NAMES = ("joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper")


def make_chunk(t_obs_s: float, value: float = 0.0, horizon: int = 10) -> ActionChunk:
    return ActionChunk(t_obs_s, 0.1, NAMES, np.full((horizon, 7), value))


def make_controller(**overrides: object) -> Controller:
    return Controller(ControllerConfig(**overrides), np.zeros(7))


def test_chunk_one_ms_older_than_max_age_is_rejected_as_stale() -> None:
    controller = make_controller(max_chunk_age_s=0.5)
    with pytest.raises(StaleChunkError, match="max_chunk_age_s = 0.5") as info:
        controller.submit(make_chunk(10.0 - 0.501), now_s=10.0)
    assert "age = now_s - t_obs_s = 0.501" in str(info.value)
    assert controller.counters["rejected_stale"] == 1
    assert controller.counters["accepted"] == 0


def test_chunk_one_ms_younger_than_max_age_is_accepted() -> None:
    controller = make_controller(max_chunk_age_s=0.5)
    controller.submit(make_chunk(10.0 - 0.499), now_s=10.0)
    assert controller.counters["accepted"] == 1
    assert controller.counters["rejected"] == 0


def test_chunk_exactly_at_max_age_is_accepted() -> None:
    controller = make_controller(max_chunk_age_s=0.5)
    controller.submit(make_chunk(9.5), now_s=10.0)
    assert controller.counters["accepted"] == 1


def test_chunk_stamped_beyond_max_future_is_rejected() -> None:
    controller = make_controller(max_future_s=0.05)
    with pytest.raises(FutureChunkError, match="max_future_s = 0.05") as info:
        controller.submit(make_chunk(10.051), now_s=10.0)
    assert "in the future" in str(info.value)
    assert controller.counters["rejected_future"] == 1
    controller.submit(make_chunk(10.049), now_s=10.0)
    assert controller.counters["accepted"] == 1


def test_empty_chunk_is_rejected() -> None:
    controller = make_controller()
    chunk = ActionChunk(0.0, 0.1, NAMES, np.zeros((0, 7)))
    with pytest.raises(EmptyChunkError, match="shape"):
        controller.submit(chunk, now_s=0.0)
    assert controller.counters["rejected_empty"] == 1


def test_chunk_with_nan_is_rejected_naming_the_entry() -> None:
    controller = make_controller()
    chunk = make_chunk(0.0)
    chunk.positions[3, 2] = np.nan
    with pytest.raises(NonFiniteChunkError, match=r"positions\[3, 2\] = nan: must be finite"):
        controller.submit(chunk, now_s=0.0)
    assert controller.counters["rejected_non_finite"] == 1


def test_chunk_with_inf_stamp_is_rejected() -> None:
    controller = make_controller()
    with pytest.raises(NonFiniteChunkError, match="t_obs_s = inf"):
        controller.submit(make_chunk(float("inf")), now_s=0.0)


def test_chunk_with_repeated_step_time_is_rejected_as_non_monotonic() -> None:
    controller = make_controller()
    chunk = make_chunk(0.0)
    chunk.time_from_start_s = np.array([0.0, 0.1, 0.2, 0.2, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9])
    with pytest.raises(NonMonotonicChunkError, match=r"offset\[3\] = 0.2 s is not after"):
        controller.submit(chunk, now_s=0.0)
    assert controller.counters["rejected_non_monotonic"] == 1


def test_chunk_with_reversed_time_is_rejected_as_non_monotonic() -> None:
    controller = make_controller()
    chunk = make_chunk(0.0)
    chunk.dt_action_s = -0.1
    with pytest.raises(NonMonotonicChunkError, match="strictly increasing"):
        controller.submit(chunk, now_s=0.0)


def test_chunk_with_swapped_joint_names_is_rejected() -> None:
    controller = make_controller()
    chunk = make_chunk(0.0)
    chunk.joint_names = ("joint2", "joint1", *NAMES[2:])
    with pytest.raises(JointMismatchError, match="expected"):
        controller.submit(chunk, now_s=0.0)
    assert controller.counters["rejected_joint_mismatch"] == 1


def test_chunk_with_wrong_dimension_is_rejected() -> None:
    controller = make_controller()
    chunk = ActionChunk(0.0, 0.1, NAMES, np.zeros((10, 6)))
    with pytest.raises(JointMismatchError, match=r"expected \[H, 7\]"):
        controller.submit(chunk, now_s=0.0)


def test_chunk_older_than_the_last_accepted_is_rejected_as_out_of_order() -> None:
    controller = make_controller()
    controller.submit(make_chunk(1.0), now_s=1.0)
    with pytest.raises(OutOfOrderChunkError, match="last accepted chunk's t_obs_s = 1.0"):
        controller.submit(make_chunk(0.9), now_s=1.0)
    assert controller.counters["rejected_out_of_order"] == 1


def test_chunk_entirely_in_the_past_is_rejected_as_stale() -> None:
    controller = make_controller(max_chunk_age_s=0.5)
    with pytest.raises(StaleChunkError, match="is not after now_s"):
        controller.submit(make_chunk(9.8, horizon=2), now_s=10.0)


def test_past_steps_are_dropped_keeping_one_before_now() -> None:
    controller = make_controller()
    controller.submit(make_chunk(9.75), now_s=10.0)
    # steps at 9.75, 9.85, 9.95 | 10.05 ... 10.65: two dropped, 9.95 kept for interpolation.
    assert controller.counters["dropped_past_steps"] == 2
    assert controller.buffered_steps(10.0) == 7
    assert controller.buffer.times_s[0] == pytest.approx(9.95)


def test_rejected_chunk_leaves_the_buffer_untouched() -> None:
    controller = make_controller()
    controller.submit(make_chunk(0.0, value=0.3), now_s=0.0)
    before = controller.buffer.positions.copy()
    bad = make_chunk(0.05, value=0.9)
    bad.positions[0, 0] = np.inf
    with pytest.raises(NonFiniteChunkError):
        controller.submit(bad, now_s=0.05)
    np.testing.assert_array_equal(controller.buffer.positions, before)
