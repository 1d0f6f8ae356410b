"""Supervisor: validation, stop categories, e-stop latch, status for /diagnostics."""

import copy
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vla_edge.config import SafetyConfig, load_node_params
from vla_edge.core import (
    CommandJointMismatchError,
    CommandOutOfLimitsError,
    JointCommand,
    NonFiniteCommandError,
    StaleCommandError,
    StopCategory,
)
from vla_edge.safety import SafetySupervisor, StatusLevel, validate_command

CONFIG = load_node_params(
    Path(__file__).resolve().parents[1] / "config" / "safety.yaml", "safety_node", SafetyConfig
)
NAMES = tuple(CONFIG.joint_names)
PERIOD_S = 1.0 / CONFIG.rate_hz
TARGET = np.array([0.2, -0.1, 0.3, 0.0, 0.1, -0.2, 0.02])
OTHER = np.array([-0.2, 0.1, -0.3, 0.0, -0.1, 0.2, 0.01])


def run(supervisor: SafetySupervisor, start_s: float, ticks: int, target=TARGET, js=True):
    outputs = []
    for k in range(ticks):
        now_s = start_s + k * PERIOD_S
        if js:
            supervisor.on_joint_state(supervisor.limiter.positions, now_s)
        outputs.append(supervisor.filter(JointCommand(now_s, NAMES, target), now_s))
    return outputs


def validate(command: JointCommand, now_s: float = 0.0):
    return validate_command(
        command,
        NAMES,
        CONFIG.limit_arrays().position_min,
        CONFIG.limit_arrays().position_max,
        now_s,
        CONFIG.command_timeout_s,
    )


def test_validation_names_the_field_value_and_bound() -> None:
    good = TARGET.copy()
    with pytest.raises(CommandJointMismatchError, match="expected"):
        validate(JointCommand(0.0, NAMES[::-1], good))
    with pytest.raises(CommandJointMismatchError, match=r"shape \(6,\), expected \(7,\)"):
        validate(JointCommand(0.0, NAMES, good[:6]))
    bad = good.copy()
    bad[4] = np.inf
    with pytest.raises(NonFiniteCommandError, match=r"positions\[joint5\] = inf: must be finite"):
        validate(JointCommand(0.0, NAMES, bad))
    bad = good.copy()
    bad[6] = 0.05
    with pytest.raises(CommandOutOfLimitsError, match=r"positions\[gripper\] = 0.05 outside"):
        validate(JointCommand(0.0, NAMES, bad))
    with pytest.raises(StaleCommandError, match="exceeds command_timeout_s = 0.1"):
        validate(JointCommand(0.0, NAMES, good), now_s=0.101)
    np.testing.assert_array_equal(validate(JointCommand(0.0, NAMES, good), now_s=0.1), good)


def test_no_command_yet_is_a_category_2_hold() -> None:
    supervisor = SafetySupervisor(CONFIG, np.zeros(7))
    np.testing.assert_array_equal(supervisor.hold(0.0), np.zeros(7))
    assert supervisor.state == StopCategory.CAT2
    assert supervisor.status()["level"] == StatusLevel.WARN
    assert "no_command" in supervisor.status()["message"]


def test_valid_commands_are_tracked_and_status_is_ok() -> None:
    supervisor = SafetySupervisor(CONFIG, np.zeros(7))
    outputs = run(supervisor, 0.0, 150)
    assert supervisor.state == StopCategory.NONE
    np.testing.assert_allclose(outputs[-1], TARGET, atol=1e-9)
    status = supervisor.status()
    assert status["level"] == StatusLevel.OK and status["message"] == "ok"
    assert status["values"]["accepted"] == 150


def test_non_finite_command_is_rejected_and_persistent_violations_stop_category_1() -> None:
    supervisor = SafetySupervisor(CONFIG, np.zeros(7))
    run(supervisor, 0.0, 50)
    bad = TARGET.copy()
    bad[0] = np.nan
    now_s = 0.5
    for _ in range(CONFIG.violation_persist_count - 1):
        supervisor.filter(JointCommand(now_s, NAMES, bad), now_s)
        now_s += PERIOD_S
    assert supervisor.state == StopCategory.NONE
    supervisor.filter(JointCommand(now_s, NAMES, bad), now_s)
    assert supervisor.state == StopCategory.CAT1
    assert supervisor.counters["rejected_non_finite"] == CONFIG.violation_persist_count
    assert supervisor.status()["level"] == StatusLevel.ERROR
    assert "violation" in supervisor.status()["message"]
    # A fresh valid command resumes.
    now_s += PERIOD_S
    supervisor.filter(JointCommand(now_s, NAMES, TARGET), now_s)
    assert supervisor.state == StopCategory.NONE


def test_rejected_commands_bring_the_arm_to_rest_instead_of_following() -> None:
    supervisor = SafetySupervisor(CONFIG, np.zeros(7))
    run(supervisor, 0.0, 10)  # moving towards TARGET
    assert not supervisor.limiter.at_rest
    far = TARGET.copy()
    far[1] = 5.0  # beyond the hard limit of joint2
    for k in range(40):
        now_s = 0.1 + k * PERIOD_S
        supervisor.on_joint_state(supervisor.limiter.positions, now_s)
        supervisor.filter(JointCommand(now_s, NAMES, far), now_s)
    assert supervisor.counters["rejected_out_of_limits"] == 40
    assert supervisor.limiter.at_rest
    assert np.all(np.abs(supervisor.limiter.positions[:6]) < np.abs(TARGET[:6]) + 1e-12)


def test_command_inside_hard_but_outside_soft_bounds_is_clamped_to_the_soft_bound() -> None:
    supervisor = SafetySupervisor(CONFIG, np.zeros(7))
    target = TARGET.copy()
    target[0] = 2.88  # soft bound 2.85, hard 2.9
    outputs = run(supervisor, 0.0, 300, target=target)
    assert outputs[-1][0] == pytest.approx(2.85, abs=1e-9)


def test_stale_command_is_a_category_2_hold_until_a_fresh_one() -> None:
    supervisor = SafetySupervisor(CONFIG, np.zeros(7))
    run(supervisor, 0.0, 20)
    supervisor.filter(JointCommand(0.2 - 0.2, NAMES, TARGET), 0.2)
    assert supervisor.state == StopCategory.CAT2
    assert supervisor.counters["rejected_stale"] == 1
    supervisor.filter(JointCommand(0.21, NAMES, TARGET), 0.21)
    assert supervisor.state == StopCategory.NONE


def test_missed_tick_keeps_tracking_but_command_silence_is_category_1() -> None:
    supervisor = SafetySupervisor(CONFIG, np.zeros(7))
    run(supervisor, 0.0, 20)
    last_s = 0.19
    supervisor.on_joint_state(supervisor.limiter.positions, last_s + 0.05)
    supervisor.hold(last_s + 0.05)
    assert supervisor.state == StopCategory.NONE
    supervisor.on_joint_state(supervisor.limiter.positions, last_s + 0.11)
    supervisor.hold(last_s + 0.11)
    assert supervisor.state == StopCategory.CAT1
    assert "command_silence" in supervisor.status()["message"]
    supervisor.filter(JointCommand(last_s + 0.12, NAMES, TARGET), last_s + 0.12)
    assert supervisor.state == StopCategory.NONE


def test_joint_state_loss_is_category_1_and_needs_joint_states_and_a_fresh_command() -> None:
    supervisor = SafetySupervisor(CONFIG, np.zeros(7))
    run(supervisor, 0.0, 20)
    run(supervisor, 0.2, 15, js=False)  # joint states stop at 0.19 s; lost after 0.29 s
    assert supervisor.state == StopCategory.CAT1
    assert "joint_state_lost" in supervisor.status()["message"]
    now_s = 0.35
    supervisor.filter(JointCommand(now_s, NAMES, TARGET), now_s)
    assert supervisor.state == StopCategory.CAT1  # commands alone do not clear it
    supervisor.on_joint_state(supervisor.limiter.positions, now_s + 0.01)
    supervisor.filter(JointCommand(now_s + 0.01, NAMES, TARGET), now_s + 0.01)
    assert supervisor.state == StopCategory.NONE


def test_persistent_tracking_error_is_category_1() -> None:
    supervisor = SafetySupervisor(CONFIG, np.zeros(7))
    run(supervisor, 0.0, 5)
    far = supervisor.limiter.positions + CONFIG.max_tracking_error + 0.1
    for k in range(CONFIG.violation_persist_count):
        supervisor.on_joint_state(far, 0.05 + k * PERIOD_S)
    supervisor.hold(0.05 + CONFIG.violation_persist_count * PERIOD_S)
    assert supervisor.state == StopCategory.CAT1
    assert supervisor.counters["tracking_errors"] == CONFIG.violation_persist_count


def test_estop_cat1_brakes_ignores_commands_and_reset_alone_never_moves() -> None:
    supervisor = SafetySupervisor(CONFIG, np.zeros(7))
    run(supervisor, 0.0, 20)
    supervisor.estop(0.2)
    assert supervisor.state == StopCategory.CAT1
    outputs = run(supervisor, 0.2, 100, target=OTHER)
    assert supervisor.limiter.at_rest
    held = outputs[-1]
    assert supervisor.counters["ignored_while_stopped"] == 100
    assert supervisor.reset(1.2) is True
    assert supervisor.reset(1.2) is False  # nothing latched any more
    for k in range(5):  # reset, but no fresh command: hold
        np.testing.assert_array_equal(supervisor.hold(1.2 + k * PERIOD_S), held)
    # A command stamped before the reset does not resume either.
    np.testing.assert_array_equal(supervisor.filter(JointCommand(1.2, NAMES, TARGET), 1.25), held)
    assert supervisor.state == StopCategory.CAT2
    out = supervisor.filter(JointCommand(1.26, NAMES, TARGET), 1.26)
    assert supervisor.state == StopCategory.NONE
    assert not np.array_equal(out, held)


def test_estop_cat0_freezes_the_output_at_once() -> None:
    config = CONFIG.model_copy(update={"estop_category": "cat0"})
    supervisor = SafetySupervisor(config, np.zeros(7))
    run(supervisor, 0.0, 20)
    frozen = supervisor.limiter.positions
    supervisor.estop(0.2)
    assert supervisor.state == StopCategory.CAT0
    for output in run(supervisor, 0.2, 20, target=OTHER):
        np.testing.assert_array_equal(output, frozen)


def test_command_stamped_in_the_future_is_stale_and_does_not_clear_a_reset() -> None:
    with pytest.raises(StaleCommandError, match=r"lies 1.000000 s after now_s = 0.0"):
        validate(JointCommand(1.0, NAMES, TARGET), now_s=0.0)
    validate(JointCommand(0.05, NAMES, TARGET), now_s=0.0)  # within command_timeout_s ahead
    supervisor = SafetySupervisor(CONFIG, np.zeros(7))
    run(supervisor, 0.0, 20)
    supervisor.estop(0.2)
    supervisor.reset(0.3)
    supervisor.on_joint_state(supervisor.limiter.positions, 0.31)
    twin = copy.deepcopy(supervisor)
    out = supervisor.filter(JointCommand(1000.0, NAMES, OTHER), 0.31)
    np.testing.assert_array_equal(out, twin.hold(0.31))  # as if no command had come
    assert supervisor.state != StopCategory.NONE
    assert supervisor.counters["rejected_stale"] == 1


def test_backward_clock_jump_holds_and_the_timeouts_run_on_the_new_clock() -> None:
    supervisor = SafetySupervisor(CONFIG, np.zeros(7))
    run(supervisor, 100.0, 20)
    assert supervisor.state == StopCategory.NONE
    supervisor.hold(1.0)  # the clock went back by 99 s (a sim-time reset)
    assert supervisor.state == StopCategory.CAT2
    assert supervisor.machine.reasons() == ["clock_jump"]
    assert supervisor.status()["values"]["clock_jumps"] == 1
    supervisor.on_joint_state(supervisor.limiter.positions, 1.0)
    supervisor.hold(1.2)  # no command since the jump: silence counts on the new clock
    assert supervisor.state == StopCategory.CAT1
    assert "command_silence" in supervisor.machine.reasons()
    run(supervisor, 1.21, 3)  # fresh commands and joint states on the new clock clear both
    assert supervisor.state == StopCategory.NONE
    # a small reordering of stamps (below the timeouts) is no jump
    supervisor.hold(1.21 + 2 * PERIOD_S - 0.05)
    assert supervisor.state == StopCategory.NONE


def test_after_a_cat0_reset_commanding_the_held_position_does_not_move() -> None:
    config = CONFIG.model_copy(update={"estop_category": "cat0"})
    supervisor = SafetySupervisor(config, np.zeros(7))
    far = TARGET.copy()
    far[0] = -2.0
    run(supervisor, 0.0, 100, target=far)  # moving fast towards -2.0 rad
    supervisor.estop(1.0)
    held = supervisor.limiter.positions
    supervisor.reset(1.05)
    outputs = run(supervisor, 1.06, 30, target=held)
    np.testing.assert_allclose(np.array(outputs), np.tile(held, (30, 1)), atol=1e-12)


# --- property: after an e-stop nothing moves until reset AND a fresh command -------------

event = st.one_of(
    st.tuples(st.just("cmd"), st.floats(-0.5, 0.5), st.sampled_from([0.0, -0.05, -0.3])),
    st.tuples(st.just("hold"), st.just(0.0), st.just(0.0)),
    st.tuples(st.just("reset"), st.just(0.0), st.just(0.0)),
)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    before=st.integers(0, 60),
    events=st.lists(st.tuples(event, st.integers(1, 30)), min_size=1, max_size=8),
)
def test_after_estop_no_motion_until_reset_and_a_fresh_command(before: int, events: list) -> None:
    supervisor = SafetySupervisor(CONFIG, np.zeros(7))
    now_s = 0.0
    for _ in range(before):
        now_s += PERIOD_S
        supervisor.on_joint_state(supervisor.limiter.positions, now_s)
        supervisor.filter(JointCommand(now_s, NAMES, np.full(7, 0.02) * 10), now_s)
    supervisor.estop(now_s)
    reference = copy.deepcopy(supervisor.limiter)  # the pure brake from the e-stop state
    reset_s = None
    for (kind, value, stamp_offset_s), repeat in events:
        for _ in range(repeat):
            now_s += PERIOD_S
            supervisor.on_joint_state(supervisor.limiter.positions, now_s)
            if kind == "reset":
                if supervisor.reset(now_s):
                    reset_s = now_s
                output = supervisor.hold(now_s)
            elif kind == "hold":
                output = supervisor.hold(now_s)
            else:
                stamp_s = now_s + stamp_offset_s
                fresh = (
                    reset_s is not None
                    and stamp_s > reset_s
                    and now_s - stamp_s <= CONFIG.command_timeout_s
                )
                output = supervisor.filter(JointCommand(stamp_s, NAMES, np.full(7, value)), now_s)
                if fresh:
                    return  # motion may legitimately resume from here
            np.testing.assert_array_equal(output, reference.brake())
