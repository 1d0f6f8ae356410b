"""Homing: a minimum-jerk trajectory to a home pose inside margin x the safety node's limits.

Properties (hypothesis) on the package's ``config/safety.yaml`` limits: for any
start and home inside the soft position band the samples start at the start,
end exactly at home, and their finite differences at the control rate (the two
commands before included, three ticks of holding after) keep every joint's
velocity, acceleration and jerk under ``home_limit_margin`` x the limits; the
real safety limiter passes them unchanged. Moving starts stop first inside the
limits (those of the controller's command, see test_control_homing_stop.py). The
:class:`Homing` follower's phases, the named errors, and what the
controller knows of the safety node's stop.
"""

from collections import deque
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from vla_edge.config import ControllerConfig, SafetyConfig, load_node_params
from vla_edge.control.homing import (
    QUINTIC_PEAK_ACCELERATION,
    QUINTIC_PEAK_JERK,
    QUINTIC_PEAK_VELOCITY,
    HomePoseLengthError,
    HomePoseOutOfLimitsError,
    Homing,
    HomingPhase,
    HomingUnavailableError,
    MotionState,
    NonFiniteHomePoseError,
    SafetyStopView,
    check_home_pose,
    homing_limits_for,
    plan_homing,
    plan_stop,
)
from vla_edge.control.jerk_stop import jerk_limited_stop
from vla_edge.safety import Limiter

ROOT = Path(__file__).resolve().parents[1]
SAFETY = load_node_params(ROOT / "config/safety.yaml", "safety_node", SafetyConfig)
CONTROLLER = load_node_params(ROOT / "config/controller.yaml", "controller_node", ControllerConfig)
NAMES = tuple(CONTROLLER.joint_names)
PERIOD_S = 1.0 / CONTROLLER.rate_hz
MARGIN = CONTROLLER.home_limit_margin
LIMITS = homing_limits_for(CONTROLLER, SAFETY)
ARRAYS = SAFETY.limit_arrays(CONTROLLER.joint_names)
LO = ARRAYS.soft_min
HI = ARRAYS.soft_max
VEL = ARRAYS.velocity_limit_per_s
ACC = np.minimum(ARRAYS.acceleration_limit_per_s2, ARRAYS.deceleration_limit_per_s2)
JERK = ARRAYS.jerk_limit_per_s3
REL_TOL = 1e-9


def derivatives(before: np.ndarray, samples: np.ndarray):
    """Finite differences of ``before``, the samples and three ticks holding the last one."""
    stream = np.vstack([before, samples, samples[-1:], samples[-1:], samples[-1:]])
    v = np.diff(stream, axis=0) / PERIOD_S
    a = np.diff(v, axis=0) / PERIOD_S
    j = np.diff(a, axis=0) / PERIOD_S
    return v, a, j


def pose(fractions) -> np.ndarray:
    """A pose inside the soft band from fractions of each joint's band."""
    return LO + np.asarray(fractions) * (HI - LO)


fractions = st.lists(st.floats(0.0, 1.0), min_size=len(NAMES), max_size=len(NAMES))


@settings(max_examples=150, deadline=None)
@given(start=fractions, home=fractions)
def test_any_homing_from_rest_keeps_the_margin_of_every_limit_and_ends_exactly_home(start, home):
    p0, goal = pose(start), pose(home)
    trajectory = plan_homing(MotionState.at_rest(p0), goal, LIMITS, PERIOD_S, NAMES)
    samples = trajectory.positions
    assert np.array_equal(samples[0], p0)  # starts at the current position
    assert np.array_equal(samples[-1], goal)  # ends exactly at home
    v, a, j = derivatives(np.stack([p0, p0]), samples)
    assert np.all(np.abs(v) <= MARGIN * VEL * (1 + REL_TOL))
    assert np.all(np.abs(a) <= MARGIN * ACC * (1 + REL_TOL))
    assert np.all(np.abs(j) <= MARGIN * JERK * (1 + REL_TOL))
    # synchronised: every joint moves monotonically from start to home (no overshoot)
    assert np.all(samples >= np.minimum(p0, goal) - 1e-12)
    assert np.all(samples <= np.maximum(p0, goal) + 1e-12)


# A move that ends exactly on a soft bound is "limited" for its last ticks by the
# limiter's brake check (from the last step's velocity it would cross the bound), with
# the output still the command to the bit: the homes here keep 1e-4 of the band clear.
inner_fractions = st.lists(st.floats(1e-4, 1.0 - 1e-4), min_size=len(NAMES), max_size=len(NAMES))


@settings(max_examples=40, deadline=None)
@given(start=fractions, home=inner_fractions)
def test_the_real_safety_limiter_passes_any_homing_unchanged(start, home):
    p0, goal = pose(start), pose(home)
    trajectory = plan_homing(MotionState.at_rest(p0), goal, LIMITS, PERIOD_S, NAMES)
    limiter = Limiter(SAFETY, p0)
    for command in [*trajectory.positions[1:], goal, goal, goal]:
        out = limiter.step(command)
        assert limiter.limited_joints == 0
        assert np.max(np.abs(out - command)) <= 1e-12


def test_the_duration_is_the_shortest_whose_peaks_keep_the_margin():
    p0 = pose([0.5] * 7)
    goal = p0 + np.array([0.9, -0.3, 0.2, 0.0, 0.1, -0.05, 0.01])
    trajectory = plan_homing(MotionState.at_rest(p0), goal, LIMITS, PERIOD_S, NAMES)
    d = np.abs(goal - p0)

    def worst_peak_ratio(duration_s: float) -> float:
        return float(
            np.max(
                np.maximum.reduce(
                    [
                        QUINTIC_PEAK_VELOCITY * d / duration_s / LIMITS.home.velocity,
                        QUINTIC_PEAK_ACCELERATION * d / duration_s**2 / LIMITS.home.acceleration,
                        QUINTIC_PEAK_JERK * d / duration_s**3 / LIMITS.home.jerk,
                    ]
                )
            )
        )

    assert worst_peak_ratio(trajectory.duration_s) <= 1.0
    assert worst_peak_ratio(trajectory.duration_s - PERIOD_S) > 1.0  # one tick less is too fast
    # the margin is the safety node's limits times home_limit_margin (and 2 J T, see shaping)
    assert np.allclose(LIMITS.home.velocity, MARGIN * VEL)
    assert np.allclose(LIMITS.home.acceleration, MARGIN * np.minimum(ACC, 2 * JERK * PERIOD_S))


def test_homing_to_where_the_arm_is_is_one_tick():
    p0 = pose([0.3] * 7)
    trajectory = plan_homing(MotionState.at_rest(p0), p0, LIMITS, PERIOD_S, NAMES)
    assert trajectory.steps == 1 and np.array_equal(trajectory.goal, p0)


def _commands_with(velocity: np.ndarray, acceleration: np.ndarray, at: np.ndarray) -> list:
    """Three commands ending at ``at`` with finite differences ``velocity``, ``acceleration``."""
    p1 = at - velocity * PERIOD_S
    p0 = p1 - (velocity - acceleration * PERIOD_S) * PERIOD_S
    return [p0, p1, at]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    start=st.lists(st.floats(0.3, 0.7), min_size=7, max_size=7),
    home=fractions,
    speed=st.lists(st.floats(-0.6, 0.6), min_size=7, max_size=7),
    accel=st.lists(st.floats(-0.6, 0.6), min_size=7, max_size=7),
)
def test_a_moving_start_stops_inside_the_limits_then_homes_inside_the_margin(
    start, home, speed, accel
):
    p0, goal = pose(start), pose(home)
    velocity = np.asarray(speed) * LIMITS.home.velocity
    acceleration = np.asarray(accel) * LIMITS.home.acceleration
    commands = _commands_with(velocity, acceleration, p0)
    state = MotionState.from_commands(commands, PERIOD_S)
    assert np.allclose(state.velocities, velocity)
    assert np.allclose(state.accelerations, acceleration)
    trajectory = plan_homing(state, goal, LIMITS, PERIOD_S, NAMES)
    samples = trajectory.positions
    assert np.array_equal(samples[0], p0) and np.array_equal(samples[-1], goal)
    v, a, j = derivatives(np.stack(commands[:2]), samples)
    # the whole stream (the commands before included) keeps the safety node's limits ...
    assert np.all(np.abs(v) <= VEL * (1 + REL_TOL))
    assert np.all(np.abs(a) <= np.minimum(ACC, 2 * JERK * PERIOD_S) * (1 + REL_TOL))
    assert np.all(np.abs(j) <= JERK * (1 + REL_TOL))
    # ... and, from rest at the end of the stop, the margin
    stop = trajectory.stop_steps
    rest = samples[stop]
    v, a, j = derivatives(np.stack([rest, rest]), samples[stop:])
    assert np.all(np.abs(v) <= MARGIN * VEL * (1 + REL_TOL))
    assert np.all(np.abs(a) <= MARGIN * np.minimum(ACC, 2 * JERK * PERIOD_S) * (1 + REL_TOL))
    assert np.all(np.abs(j) <= MARGIN * JERK * (1 + REL_TOL))


def test_a_stop_from_motion_with_room_brakes_at_the_homing_margin_and_ends_in_closed_form():
    p0 = pose([0.5] * 7)
    velocity = 0.5 * LIMITS.home.velocity
    state = MotionState.from_commands(_commands_with(velocity, np.zeros(7), p0), PERIOD_S)
    stop = plan_stop(state, LIMITS, PERIOD_S)
    # each joint: the shortest jerk-limited stop at home_limit_margin's bounds (the
    # gentlest level), from constant velocity v: v^2 / (2 A) + v A / (2 J) when it holds A
    expected = [
        jerk_limited_stop(p0[i], velocity[i], 0.0, LIMITS.home.acceleration[i], LIMITS.home.jerk[i])
        for i in range(7)
    ]
    a, j = LIMITS.home.acceleration, LIMITS.home.jerk
    assert np.all(velocity > a * a / j)  # the profile holds the braking bound
    textbook = velocity**2 / (2 * a) + velocity * a / (2 * j)
    assert np.allclose(stop.goal - p0, textbook, rtol=1e-9, atol=0)
    assert np.allclose(stop.goal, [e.end_position for e in expected], rtol=0, atol=1e-10)
    assert stop.steps == max(int(np.ceil(e.duration_s / PERIOD_S)) for e in expected)
    travel = np.diff(stop.positions, axis=0)
    assert np.all(travel * np.sign(velocity) >= -1e-15)  # no reversal
    v, _, _ = derivatives(
        np.stack([p0 - 2 * velocity * PERIOD_S, p0 - velocity * PERIOD_S]), stop.positions
    )
    assert np.all(np.abs(v[-3:]) <= 1e-9)  # at rest


def test_from_commands_is_the_finite_difference_state():
    commands = [np.zeros(7), np.full(7, 0.01), np.full(7, 0.03)]
    state = MotionState.from_commands(commands, PERIOD_S)
    assert np.allclose(state.positions, 0.03)
    assert np.allclose(state.velocities, 2.0)  # 0.02 / 0.01 s
    assert np.allclose(state.accelerations, 100.0)  # (2 - 1) / 0.01 s
    assert np.allclose(state.history(PERIOD_S), np.stack(commands[:2]))
    recent = deque([np.full(7, -1.0), *commands], maxlen=3)  # what the node keeps
    assert np.allclose(MotionState.from_commands(recent, PERIOD_S).velocities, 2.0)
    rest = MotionState.from_commands([np.ones(7)], PERIOD_S)
    assert rest.at_rest_now and np.allclose(rest.positions, 1.0)
    with pytest.raises(HomingUnavailableError, match="no command yet"):
        MotionState.from_commands([], PERIOD_S)


# --- named errors ---------------------------------------------------------------------------


def test_a_home_pose_of_the_wrong_length_is_refused_with_the_count():
    with pytest.raises(HomePoseLengthError, match="6 entries, expected 7"):
        check_home_pose(np.zeros(6), NAMES, LIMITS.home)


def test_a_non_finite_home_pose_is_refused_naming_the_joint():
    home = pose([0.5] * 7)
    home[2] = np.nan
    with pytest.raises(NonFiniteHomePoseError, match="joint3 = nan"):
        plan_homing(MotionState.at_rest(pose([0.5] * 7)), home, LIMITS, PERIOD_S, NAMES)


def test_a_home_pose_outside_the_soft_band_is_refused_naming_joint_value_and_bound():
    home = pose([0.5] * 7)
    home[1] = ARRAYS.position_max[1] - 0.01  # inside the hard limit, outside the soft band
    with pytest.raises(HomePoseOutOfLimitsError) as info:
        check_home_pose(home, NAMES, LIMITS.home)
    message = str(info.value)
    assert "joint2" in message and f"{home[1]}" in message and f"{HI[1]}" in message
    assert "above the upper bound" in message


def test_the_configured_home_pose_is_inside_the_band_and_checked_by_the_config():
    assert np.array_equal(
        check_home_pose(CONTROLLER.home_positions, NAMES, LIMITS.home), CONTROLLER.home_positions
    )
    with pytest.raises(ValidationError, match="home_positions has 3 entries, expected 7"):
        ControllerConfig(home_positions=[0.0, 0.0, 0.0])
    outside = list(CONTROLLER.home_positions)
    outside[4] = 2.5
    with pytest.raises(ValidationError, match="joint joint5: home_positions = 2.5"):
        CONTROLLER.model_copy(update={}).model_validate(
            {**CONTROLLER.model_dump(), "home_positions": outside}
        )


def test_the_sims_home_pose_is_where_the_evaluators_env_starts():
    from vla_edge.sim.env import TabletopEnv
    from vla_edge.sim.tasks import initial_joint_positions

    env = TabletopEnv(cameras=("agentview",))
    try:
        env.reset("lift_green_block", 7)
        assert np.allclose(initial_joint_positions("lift_green_block", 7), env.state(), atol=1e-9)
    finally:
        env.close()
    check_home_pose(initial_joint_positions("lift_green_block", 7), NAMES, LIMITS.home)


# --- the follower ---------------------------------------------------------------------------


def _homing() -> Homing:
    return Homing(LIMITS, PERIOD_S, NAMES, tolerance=0.02, settle_timeout_s=1.0)


def test_the_follower_sends_each_sample_once_then_is_done_within_the_tolerance():
    homing = _homing()
    p0, goal = pose([0.4] * 7), pose([0.6] * 7)
    trajectory = homing.start(MotionState.at_rest(p0), goal, now_s=10.0)
    assert homing.phase == HomingPhase.MOVING and homing.following and not homing.accepts_chunks
    assert homing.remaining_s() == pytest.approx(trajectory.duration_s)
    sent = []
    t = 10.0
    while homing.following:
        t += PERIOD_S
        sent.append(homing.next_command(t))
        homing.update(p0, t)  # the arm lags: not done while the trajectory runs
    assert np.array_equal(np.stack(sent), trajectory.positions[1:])
    assert homing.phase == HomingPhase.MOVING and not homing.accepts_chunks  # settling
    homing.update(goal + 0.019, t + PERIOD_S)
    assert homing.homed and homing.accepts_chunks and homing.phase == HomingPhase.DONE
    assert homing.last_result.startswith("homed in ")
    status = homing.status()
    assert status["homing"] == "done" and status["homing.remaining_s"] == 0.0
    homing.leave_home()  # a chunk was accepted
    assert homing.phase == HomingPhase.IDLE and not homing.homed


def test_the_follower_fails_when_the_arm_does_not_settle_naming_the_joint():
    homing = _homing()
    goal = pose([0.6] * 7)
    homing.start(MotionState.at_rest(goal), goal, now_s=0.0)
    homing.next_command(0.01)
    stuck = goal.copy()
    stuck[3] += 0.1
    homing.update(stuck, 0.5)
    assert homing.phase == HomingPhase.MOVING
    homing.update(stuck, 1.02)
    assert homing.phase == HomingPhase.IDLE and homing.counters["failed"] == 1
    assert "joint4 is 0.1000 from home" in homing.last_result


def test_an_abort_turns_the_rest_into_a_stop_inside_the_limits():
    homing = _homing()
    p0, goal = pose([0.2] * 7), pose([0.8] * 7)
    homing.start(MotionState.at_rest(p0), goal, now_s=0.0)
    sent = [p0, p0] + [homing.next_command(0.01 * k) for k in range(1, 40)]
    homing.abort("the e-stop was pressed", MotionState.from_commands(sent, PERIOD_S))
    assert homing.phase == HomingPhase.IDLE and homing.last_result.startswith("aborted: the e-stop")
    assert homing.following and not homing.accepts_chunks  # the stop still runs
    while homing.following:
        sent.append(homing.next_command(1.0))
    stream = np.stack(sent)
    v, a, j = derivatives(stream[:2], stream[2:])
    assert np.all(np.abs(v) <= VEL) and np.all(np.abs(j) <= JERK * (1 + REL_TOL))
    assert np.all(np.abs(v[-3:]) <= 1e-9)  # at rest, short of home
    assert np.all(stream[-1] < goal) and homing.accepts_chunks
    homing.abort("again", MotionState.at_rest(stream[-1]))  # nothing to abort any more
    assert homing.counters["aborted"] == 1


# --- the safety node's stop -----------------------------------------------------------------


def test_the_controller_sees_an_estop_at_once_until_a_later_status_shows_it_cleared():
    view = SafetyStopView(max_status_age_s=3.0)
    assert view.stop_reason(0.0) is None  # nothing known: nothing refused
    view.on_status("none", "", False, stamp_s=1.0, now_s=1.0)
    view.on_estop(1.5)
    assert "e-stop" in view.stop_reason(1.6)
    view.on_status("none", "", False, stamp_s=1.4, now_s=1.7)  # published before the press
    assert "e-stop" in view.stop_reason(1.7)
    view.on_status("cat1", "estop", True, stamp_s=2.0, now_s=2.0)
    assert "e-stop" in view.stop_reason(2.0)
    view.on_status("cat2", "awaiting_command_after_reset", False, stamp_s=3.0, now_s=3.0)
    assert view.stop_reason(3.0) is None  # cleared; a category 2 clears with the next command


def test_a_category_1_status_or_a_silent_safety_node_is_a_stop():
    view = SafetyStopView(max_status_age_s=3.0)
    view.on_status("cat1", "joint_state_lost", False, stamp_s=0.0, now_s=0.0)
    assert view.stop_reason(0.5) == "the safety node holds a cat1 stop (joint_state_lost)"
    view.on_status("none", "", False, stamp_s=1.0, now_s=1.0)
    assert view.stop_reason(3.9) is None
    assert view.stop_reason(4.5) == "no status from the safety node for 3.5 s"


def test_a_joint_speeding_towards_its_bound_stops_on_the_bound_inside_the_limits():
    """The gripper closing at the shaping margin's acceleration near its closed bound: the
    gentle stop (home_limit_margin) would run past the bound, so it brakes harder, just
    enough to end on it (seen in the graph: a reset refused as 'no stop within 5.0 s')."""
    stop_limits = LIMITS.stop
    velocity, acceleration = np.zeros(7), np.zeros(7)
    velocity[-1] = -0.8 * ARRAYS.velocity_limit_per_s[-1]
    acceleration[-1] = -stop_limits.acceleration[-1]
    p0 = pose([0.5] * 7)
    p0[-1] = LO[-1] + 0.5 * (HI[-1] - LO[-1])
    state = MotionState.from_commands(_commands_with(velocity, acceleration, p0), PERIOD_S)
    gentle = jerk_limited_stop(
        p0[-1],
        velocity[-1] + 0.5 * acceleration[-1] * PERIOD_S,
        acceleration[-1],
        LIMITS.home.acceleration[-1],
        LIMITS.home.jerk[-1],
    )
    assert gentle.end_position < LO[-1]  # the gentle stop would cross the bound
    stop = plan_stop(state, LIMITS, PERIOD_S, NAMES)
    gripper = stop.positions[:, -1]
    assert gripper.min() >= LO[-1] and np.isclose(gripper[-1], LO[-1], rtol=0, atol=1e-9)
    v, a, j = derivatives(np.stack(state.history(PERIOD_S)), stop.positions)
    assert np.all(np.abs(v) <= stop_limits.velocity * (1 + REL_TOL))
    assert np.all(np.abs(a) <= stop_limits.acceleration * (1 + REL_TOL))
    assert np.all(np.abs(j) <= stop_limits.jerk * (1 + REL_TOL))
    assert np.all(np.abs(v[-3:]) <= 1e-9)  # at rest
