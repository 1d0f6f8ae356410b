"""Controller sampling, hold, remaining plan and the inference trigger."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vla_edge.config import ControllerConfig
from vla_edge.control import Controller
from vla_edge.control.interpolation import finite_difference_tangents, sample_cubic
from vla_edge.core import ActionChunk, ChunkRejectedError, InvalidCommandError

NAMES = ("joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper")
PERIOD_S = 0.01


def chunk_from(t_obs_s: float, column: np.ndarray) -> ActionChunk:
    return ActionChunk(t_obs_s, 0.1, NAMES, np.repeat(column[:, None], 7, axis=1))


def test_linear_interpolation_gives_the_midpoint_between_steps() -> None:
    controller = Controller(ControllerConfig(interpolation="linear"), np.zeros(7))
    controller.submit(chunk_from(0.0, np.arange(10) * 0.1), now_s=0.0)
    assert controller.step(0.25).positions[0] == pytest.approx(0.25)


def test_cubic_interpolation_passes_through_steps_with_continuous_velocity() -> None:
    times = 0.1 * np.arange(10)
    positions = np.sin(3.0 * times)[:, None]
    tangents = finite_difference_tangents(times, positions)
    for k in range(1, 9):
        p_at, _ = sample_cubic(times, positions, tangents, times[k])
        assert p_at[0] == pytest.approx(positions[k, 0], abs=1e-12)
        _, v_left = sample_cubic(times, positions, tangents, times[k] - 1e-9)
        _, v_right = sample_cubic(times, positions, tangents, times[k] + 1e-9)
        assert v_left[0] == pytest.approx(v_right[0], abs=1e-6)


def test_exhausted_buffer_ramps_velocity_to_zero_within_hold_ramp_without_jump() -> None:
    config = ControllerConfig(hold_ramp_s=0.2, interpolation="linear")
    controller = Controller(config, np.zeros(7))
    controller.submit(chunk_from(0.0, 0.5 * 0.1 * np.arange(10)), now_s=0.0)
    positions = [controller.step(k * PERIOD_S).positions[0] for k in range(150)]
    velocity = np.diff(positions) / PERIOD_S
    end_k = 90  # last chunk step at 0.9 s; the start-up bridge is over by 0.2 s
    after_bridge = velocity[20:]
    assert np.max(np.abs(after_bridge)) <= 0.5 + 1e-9
    assert np.max(np.abs(np.diff(after_bridge))) <= 0.5 * PERIOD_S / 0.2 + 1e-9
    assert controller.holding
    # Velocity is zero once hold_ramp_s has passed; the arm settles at end + v * ramp / 2.
    assert np.all(np.abs(velocity[end_k + 20 :]) < 1e-9)
    assert positions[-1] == pytest.approx(0.45 + 0.5 * 0.2 / 2.0)
    assert controller.counters["hold_entries"] == 1


def test_controller_without_chunks_holds_the_initial_position() -> None:
    controller = Controller(ControllerConfig(), np.full(7, 0.3))
    for k in range(5):
        np.testing.assert_array_equal(controller.step(k * PERIOD_S).positions, 0.3)
    assert controller.holding


def test_new_chunk_after_a_hold_is_spliced_in_without_a_jump() -> None:
    controller = Controller(ControllerConfig(merge="weighted"), np.zeros(7))
    controller.submit(chunk_from(0.0, np.full(10, 0.1)), now_s=0.0)
    last = controller.step(1.5).positions
    controller.submit(chunk_from(1.5, np.full(10, 0.4)), now_s=1.5)
    assert controller.step(1.5).positions[0] == pytest.approx(last[0])
    assert not controller.holding


def test_remaining_plan_is_stamped_now_on_the_action_grid() -> None:
    controller = Controller(ControllerConfig(interpolation="linear"), np.zeros(7))
    controller.submit(chunk_from(0.0, 0.1 * np.arange(10)), now_s=0.0)
    plan = controller.remaining_plan(0.35)
    assert plan is not None
    assert plan.t_obs_s == 0.35
    assert plan.horizon == 6  # 0.35, 0.45, ..., 0.85 (the buffer ends at 0.9)
    np.testing.assert_allclose(plan.positions[:, 0], 0.35 + 0.1 * np.arange(6), atol=1e-12)
    assert controller.remaining_plan(2.0) is None


def test_threshold_trigger_asks_for_inference_at_half_a_chunk() -> None:
    config = ControllerConfig(infer_trigger="threshold", threshold_fraction=0.5)
    controller = Controller(config, np.zeros(7))
    assert controller.needs_inference(0.0)
    controller.submit(chunk_from(0.0, np.zeros(10)), now_s=0.0)
    assert controller.buffered_steps(0.35) == 6
    assert not controller.needs_inference(0.35)
    assert controller.buffered_steps(0.45) == 5
    assert controller.needs_inference(0.45)


def test_continuous_trigger_always_asks_for_inference() -> None:
    controller = Controller(ControllerConfig(infer_trigger="continuous"), np.zeros(7))
    controller.submit(chunk_from(0.0, np.zeros(10)), now_s=0.0)
    assert controller.needs_inference(0.0)


def test_diagnostics_report_counters_and_buffer_state() -> None:
    controller = Controller(ControllerConfig(merge="ensemble"), np.zeros(7))
    controller.submit(chunk_from(0.0, np.zeros(10)), now_s=0.02)
    controller.step(0.02, measured_positions=np.full(7, 0.01))
    diagnostics = controller.diagnostics(0.02)
    assert diagnostics["merge"] == "ensemble"
    assert diagnostics["accepted"] == 1
    assert diagnostics["buffered_steps"] == 9
    assert diagnostics["last_chunk_age_s"] == pytest.approx(0.02)
    assert diagnostics["tracking_error"] == pytest.approx(0.01)


def test_initial_positions_of_wrong_shape_are_refused() -> None:
    with pytest.raises(InvalidCommandError, match=r"shape \(6,\), expected \(7,\)"):
        Controller(ControllerConfig(), np.zeros(6))


chunk_event = st.tuples(
    st.sampled_from([0.0, -0.02, -0.3, -0.6, 0.04, 0.2, np.nan, np.inf]),  # t_obs - now
    st.sampled_from([0.1, 0.05, 0.0, -0.1]),  # dt_action_s
    st.integers(0, 12),  # horizon
    st.sampled_from([0.0, 0.5, 1e9, np.nan, -np.inf]),  # value
    st.integers(1, 15),  # ticks until the next chunk
    st.sampled_from(["replace", "weighted", "ensemble", "prefix"]),
)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=st.lists(chunk_event, min_size=1, max_size=8),
    merge=st.sampled_from(["replace", "weighted", "ensemble", "prefix"]),
)
def test_any_chunk_stream_is_accepted_or_rejected_by_name_and_commands_stay_finite(
    events: list, merge: str
) -> None:
    controller = Controller(ControllerConfig(merge=merge), np.zeros(7))
    now_s = 1.0
    for age_s, dt_s, horizon, value, ticks, _ in events:
        positions = np.full((horizon, 7), value)
        with np.errstate(invalid="ignore"):  # inf * 0 -> nan is one of the inputs we want
            positions[:, 0] = value * np.linspace(0.0, 1.0, horizon)
        chunk = ActionChunk(now_s + age_s, dt_s, NAMES, positions)
        accepted_before = controller.counters["accepted"]
        try:
            controller.submit(chunk, now_s)
        except ChunkRejectedError as exc:
            assert controller.counters[f"rejected_{exc.reason}"] >= 1
        else:
            assert controller.counters["accepted"] == accepted_before + 1
            assert np.isfinite(value)
        for _ in range(ticks):
            now_s += PERIOD_S
            command = controller.step(now_s)
            assert np.all(np.isfinite(command.positions))
    total = controller.counters["accepted"] + controller.counters["rejected"]
    assert total == len(events)
