"""The four merge strategies, with the numbers each one must produce."""

import math

import numpy as np
import pytest

from vla_edge.config import ControllerConfig, SafetyConfig, load_node_params
from vla_edge.control import Controller
from vla_edge.core import ActionChunk

NAMES = ("joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper")
PERIOD_S = 0.01


def constant_chunk(t_obs_s: float, value: float) -> ActionChunk:
    return ActionChunk(t_obs_s, 0.1, NAMES, np.full((10, 7), value))


def ramp_chunk(t_obs_s: float, offset: float, velocity: float) -> ActionChunk:
    times = t_obs_s + 0.1 * np.arange(10)
    column = offset + velocity * times
    positions = np.repeat(column[:, None], 7, axis=1)
    positions[:, 6] = 0.02
    return ActionChunk(t_obs_s, 0.1, NAMES, positions)


def controller_for(merge: str, initial: float = 0.0, **overrides: object) -> Controller:
    config = ControllerConfig(merge=merge, interpolation="linear", **overrides)
    return Controller(config, np.full(7, initial))


def test_weighted_blends_overlapping_steps_old_03_new_07() -> None:
    controller = controller_for("weighted", weighted_old_weight=0.3)
    controller.submit(constant_chunk(0.0, 0.0), now_s=0.0)
    controller.submit(constant_chunk(0.5, 1.0), now_s=0.5)
    buffer = controller.buffer
    overlap = buffer.times_s <= 0.9 + 1e-9
    new_only = buffer.times_s > 0.9 + 1e-9
    # The new chunk spans 0.5..1.4; the old one ended at 0.9.
    np.testing.assert_allclose(buffer.positions[overlap & (buffer.times_s >= 0.5)], 0.7)
    np.testing.assert_allclose(buffer.positions[new_only], 1.0)
    assert new_only.sum() == 5


def test_ensemble_weights_predictions_by_exp_minus_decay_times_index() -> None:
    decay = 0.5
    controller = controller_for("ensemble", ensemble_decay=decay)
    for k, value in enumerate((0.0, 1.0, 2.0)):
        controller.submit(constant_chunk(0.1 * k, value), now_s=0.1 * k)
    buffer = controller.buffer
    w = [math.exp(-decay * i) for i in range(3)]
    three = (0.0 * w[0] + 1.0 * w[1] + 2.0 * w[2]) / sum(w)
    two = (1.0 * w[0] + 2.0 * w[1]) / (w[0] + w[1])
    at = {round(float(t), 6): i for i, t in enumerate(buffer.times_s)}
    # 0.2..0.9: three predictions; 1.0: two (chunks from 0.1 and 0.2); 1.1: only the newest.
    assert buffer.counts[at[0.5]] == 3
    assert buffer.positions[at[0.5], 0] == pytest.approx(three, abs=1e-12)
    assert buffer.positions[at[1.0], 0] == pytest.approx(two, abs=1e-12)
    assert buffer.positions[at[1.1], 0] == pytest.approx(2.0, abs=1e-12)
    assert buffer.weights[at[0.5]] == pytest.approx(sum(w))


def test_ensemble_with_zero_decay_is_the_plain_mean() -> None:
    controller = controller_for("ensemble", ensemble_decay=0.0)
    controller.submit(constant_chunk(0.0, 0.0), now_s=0.0)
    controller.submit(constant_chunk(0.1, 1.0), now_s=0.1)
    at = {round(float(t), 6): i for i, t in enumerate(controller.buffer.times_s)}
    assert controller.buffer.positions[at[0.5], 3] == pytest.approx(0.5)


def test_replace_splice_starts_at_the_current_state_and_joins_the_new_chunk() -> None:
    controller = controller_for("replace", bridge_duration_s=0.2)
    controller.submit(ramp_chunk(0.0, 0.0, 0.5), now_s=0.0)
    for k in range(31):
        controller.step(k * PERIOD_S)
    position_before, velocity_before = controller._planned_state(0.3)
    controller.submit(ramp_chunk(0.3, 0.05, 0.3), now_s=0.3)
    position_after, velocity_after = controller._planned_state(0.3)
    np.testing.assert_allclose(position_after, position_before, atol=1e-12)
    np.testing.assert_allclose(velocity_after, velocity_before, atol=1e-12)
    # After the bridge the command is the new chunk exactly.
    for k in range(31, 60):
        controller.step(k * PERIOD_S)
    command = controller.step(0.6).positions
    assert command[0] == pytest.approx(0.05 + 0.3 * 0.6, abs=1e-12)


def _max_velocity_jump(merge: str, bridge_duration_s: float) -> float:
    controller = controller_for(merge, bridge_duration_s=bridge_duration_s)
    controller.submit(ramp_chunk(0.0, 0.0, 0.5), now_s=0.0)
    positions = []
    for k in range(80):
        now_s = k * PERIOD_S
        if k == 30:
            controller.submit(ramp_chunk(now_s, 0.05, 0.3), now_s=now_s)
        positions.append(controller.step(now_s).positions[:6])
    velocity = np.diff(np.array(positions), axis=0) / PERIOD_S
    return float(np.max(np.abs(np.diff(velocity, axis=0))))


def test_replace_splice_velocity_jump_stays_within_what_the_limiter_allows() -> None:
    safety = load_node_params("config/safety.yaml", "safety_node", SafetyConfig)
    allowed = min(safety.limit_arrays().acceleration_limit_per_s2[:6]) / safety.rate_hz
    jump = _max_velocity_jump("replace", bridge_duration_s=0.2)
    assert jump <= allowed, f"velocity jump {jump} rad/s per tick > {allowed}"
    # Without the bridge the same splice jumps far beyond the limiter's allowance.
    assert _max_velocity_jump("replace", bridge_duration_s=0.0) > 3.0 * allowed


@pytest.mark.parametrize("merge", ["weighted", "ensemble"])
def test_blended_plan_is_joined_from_the_commanded_state(merge: str) -> None:
    safety = load_node_params("config/safety.yaml", "safety_node", SafetyConfig)
    allowed = min(safety.limit_arrays().acceleration_limit_per_s2[:6]) / safety.rate_hz
    jump = _max_velocity_jump(merge, bridge_duration_s=0.2)
    assert jump <= allowed, f"velocity jump {jump} rad/s per tick > {allowed}"
    # Without the bridge (LeRobot's and ACT's way) the same blend jumps.
    assert _max_velocity_jump(merge, bridge_duration_s=0.0) > 3.0 * allowed


def test_prefix_uses_a_splice_no_longer_than_one_action_step() -> None:
    controller = controller_for("prefix", bridge_duration_s=0.2)
    controller.submit(ramp_chunk(0.0, 0.0, 0.5), now_s=0.0)
    controller.step(0.3)
    controller.submit(ramp_chunk(0.3, 0.01, 0.5), now_s=0.3)
    bridge = controller.buffer.bridge
    assert bridge is not None
    assert bridge.duration_s == pytest.approx(0.1)
    command = controller.step(0.4).positions
    assert command[0] == pytest.approx(0.01 + 0.5 * 0.4, abs=1e-12)


def test_prefix_chunk_agreeing_with_the_plan_changes_nothing() -> None:
    controller = controller_for("prefix")
    controller.submit(ramp_chunk(0.0, 0.0, 0.5), now_s=0.0)
    expected = [controller._planned_state(t)[0][0] for t in (0.32, 0.37, 0.45)]
    controller.submit(ramp_chunk(0.3, 0.0, 0.5), now_s=0.3)
    got = [controller._planned_state(t)[0][0] for t in (0.32, 0.37, 0.45)]
    np.testing.assert_allclose(got, expected, atol=1e-12)


@pytest.mark.parametrize("merge", ["weighted", "ensemble"])
def test_blending_strategies_splice_when_nothing_is_buffered_ahead(merge: str) -> None:
    controller = controller_for(merge, initial=0.2)
    controller.submit(constant_chunk(0.0, 0.6), now_s=0.0)
    assert controller.buffer.bridge is not None
    assert controller.step(0.0).positions[0] == pytest.approx(0.2)


@pytest.mark.parametrize("merge", ["replace", "weighted", "ensemble", "prefix"])
def test_chunk_ending_inside_the_bridge_is_joined_at_bridge_speed(merge: str) -> None:
    # an accepted chunk whose last step lies 5 ms ahead: the bridge still takes its
    # full length (prefix: one action step) and the plan rests at that last step
    controller = controller_for(merge, bridge_duration_s=0.2)
    controller.submit(ActionChunk(-0.095, 0.1, NAMES, np.full((2, 7), 0.03)), now_s=0.0)
    bridge_s = 0.1 if merge == "prefix" else 0.2
    positions = np.array([controller.step(k * PERIOD_S).positions for k in range(40)])
    steps = np.abs(np.diff(positions, axis=0))
    # a cubic from rest to rest over T moves at most 1.5 * distance / T
    assert float(np.max(steps)) <= 1.5 * 0.03 / bridge_s * PERIOD_S + 1e-12
    np.testing.assert_allclose(positions[-1], 0.03, atol=1e-12)
