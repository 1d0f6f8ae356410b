"""Clock jumps drop the time-indexed plan; chunks outside the joint limits are refused."""

from __future__ import annotations

import numpy as np
import pytest

from vla_edge.config.loader import load_node_params
from vla_edge.config.models import ControllerConfig, SafetyConfig
from vla_edge.config.paths import config_path
from vla_edge.control.controller import Controller
from vla_edge.control.watchdog import Watchdog
from vla_edge.core.errors import NonFiniteClockError, OutOfLimitsChunkError
from vla_edge.core.stop import StopCategory
from vla_edge.core.types import ActionChunk

JOINTS = ["j0", "j1"]


def _config(**kw) -> ControllerConfig:
    base = dict(
        joint_names=JOINTS,
        merge="replace",
        interpolation="linear",
        bridge_duration_s=0.0,
        position_min=[-1.0, -1.0],
        position_max=[1.0, 1.0],
    )
    base.update(kw)
    return ControllerConfig(**base)


def _ramp_chunk(t_obs_s: float, start: float, slope_per_step: float) -> ActionChunk:
    steps = np.arange(10, dtype=np.float64)
    positions = np.stack([start + slope_per_step * steps, np.zeros(10)], axis=1)
    return ActionChunk(t_obs_s, 0.1, tuple(JOINTS), positions)


def test_chunk_with_a_step_outside_the_joint_limits_is_rejected():
    controller = Controller(_config(), np.zeros(2))
    with pytest.raises(OutOfLimitsChunkError, match=r"positions\[9, 0\] \(j0\) = 1\.080000"):
        controller.submit(_ramp_chunk(0.0, 0.0, 0.12), 0.0)
    assert controller.counters["rejected_out_of_limits"] == 1
    assert controller.buffer.is_empty


def test_chunk_exactly_at_the_limit_is_accepted():
    controller = Controller(_config(), np.zeros(2))
    controller.submit(_ramp_chunk(0.0, 0.1, 0.1), 0.0)  # last step = 1.0
    assert controller.counters["accepted"] == 1


def test_backward_clock_jump_drops_the_plan_and_holds_without_a_jump():
    controller = Controller(_config(), np.zeros(2))
    controller.submit(_ramp_chunk(0.0, 0.0, 0.05), 0.0)
    commands = [controller.step(k * 0.01).positions[0] for k in range(30)]
    assert not controller.holding
    jumped = controller.step(0.29 - 2.0).positions[0]
    assert controller.clock_jumped
    assert controller.counters["clock_jumps"] == 1
    assert controller.holding
    # position continues from the last command (no jump), then comes to rest
    assert abs(jumped - commands[-1]) < 0.01
    rest = [controller.step(0.29 - 2.0 + k * 0.01).positions[0] for k in range(1, 40)]
    assert np.max(np.abs(np.diff(rest))) <= 0.005 + 1e-9
    assert rest[-1] == pytest.approx(rest[-2])
    # a chunk on the new clock is accepted (the order check restarted)
    controller.submit(_ramp_chunk(-1.3, rest[-1], 0.0), -1.3)
    assert not controller.holding


@pytest.mark.parametrize("interpolation", ["linear", "cubic"])
def test_clock_jump_on_a_knot_ramps_down_from_the_planned_velocity(interpolation):
    controller = Controller(_config(interpolation=interpolation), np.zeros(2))
    controller.submit(_ramp_chunk(0.0, 0.0, 0.05), 0.0)
    for k in range(51):
        last = controller.step(k * 0.01).positions[0]  # the last tick, t = 0.5, is a knot
    after = [controller.step(10.0 + k * 0.01).positions[0] for k in range(5)]
    assert controller.counters["clock_jumps"] == 1
    assert after[0] == pytest.approx(last)
    assert after[1] > after[0]  # still moving, ramping down: not a dead stop


def test_non_finite_clock_changes_nothing_and_is_refused_for_chunks():
    controller = Controller(_config(), np.zeros(2))
    controller.submit(_ramp_chunk(0.0, 0.0, 0.05), 0.0)
    commands = [controller.step(k * 0.01).positions.copy() for k in range(3)]
    for bad in (float("nan"), float("inf")):
        command = controller.step(bad)
        np.testing.assert_array_equal(command.positions, commands[-1])
        assert command.stamp_s == pytest.approx(0.02)
        with pytest.raises(NonFiniteClockError, match="must be finite"):
            controller.submit(_ramp_chunk(0.0, 0.0, 0.05), bad)
    assert controller.counters["non_finite_clock_steps"] == 2
    assert controller.counters["rejected_non_finite_clock"] == 2
    assert controller.counters["clock_jumps"] == 0
    following = controller.step(0.03).positions
    assert np.all(np.isfinite(following))
    assert abs(following[0] - commands[-1][0]) < 0.01


def test_forward_clock_jump_beyond_the_threshold_drops_the_plan():
    controller = Controller(_config(clock_jump_threshold_s=0.25), np.zeros(2))
    controller.submit(_ramp_chunk(0.0, 0.0, 0.05), 0.0)
    for k in range(10):
        controller.step(k * 0.01)
    controller.step(0.09 + 0.2)  # a late tick inside the threshold is no jump
    assert not controller.clock_jumped
    controller.step(0.29 + 0.3)
    assert controller.clock_jumped
    assert controller.holding


def test_watchdog_restart_rebases_every_heartbeat():
    watchdog = Watchdog({"chunk": (1.0, StopCategory.CAT2)}, start_s=10.0)
    # clock steps back 5 s: the old beat lies in the future and would never expire
    assert watchdog.check(5.0 + 3.0) is StopCategory.NONE
    watchdog.restart(5.0)
    assert watchdog.check(5.0 + 1.5) is StopCategory.CAT2


def test_observation_timeout_must_exceed_max_chunk_age():
    from vla_edge.config.loader import validate_params
    from vla_edge.core.errors import ConfigError

    with pytest.raises(ConfigError, match="observation_timeout_s"):
        validate_params(
            ControllerConfig, {"observation_timeout_s": 0.5, "max_chunk_age_s": 0.5}, "test"
        )


def test_shipped_controller_limits_equal_the_safety_limits():
    controller = load_node_params(
        config_path("controller.yaml"), "controller_node", ControllerConfig
    )
    safety = load_node_params(config_path("safety.yaml"), "safety_node", SafetyConfig)
    assert controller.joint_names == safety.joint_names
    limits = safety.limit_arrays(controller.joint_names)
    assert controller.position_min == limits.position_min.tolist()
    assert controller.position_max == limits.position_max.tolist()


def test_stop_ramps_to_a_hold_from_the_current_motion_without_a_jump():
    controller = Controller(_config(hold_ramp_s=0.2), np.zeros(2))
    controller.submit(_ramp_chunk(0.0, 0.0, 0.05), 0.0)  # 0.5 rad/s
    commands = [controller.step(k * 0.01).positions[0] for k in range(20)]
    controller.stop(0.2)
    assert controller.holding
    assert controller.counters["stops"] == 1
    commands += [controller.step(0.2 + k * 0.01).positions[0] for k in range(40)]
    velocity = np.diff(commands) / 0.01
    # linear velocity ramp: 0.5 rad/s to 0 over 0.2 s is 0.025 rad/s per 10 ms tick
    assert np.max(np.abs(np.diff(velocity))) < 0.03
    assert velocity[-1] == pytest.approx(0.0, abs=1e-9)
    assert commands[-1] < 0.05 * 2.0 + 0.5 * 0.2  # stopped within the ramp distance
    controller.stop(0.7)  # already holding: no second stop
    assert controller.counters["stops"] == 1


def test_command_is_clamped_inside_the_position_limits():
    controller = Controller(_config(hold_ramp_s=1.0), np.array([0.9, 0.0]))
    controller.submit(_ramp_chunk(0.0, 0.9, 0.0111), 0.0)  # ends at 0.9999, moving up
    commands = [controller.step(k * 0.01).positions[0] for k in range(200)]
    assert max(commands) <= 1.0
    assert controller.counters["limit_clamps"] > 0
