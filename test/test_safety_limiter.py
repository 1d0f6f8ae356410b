"""The limiter: exact passthrough when feasible, and the limits for any input stream."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vla_edge.config import SafetyConfig, load_node_params
from vla_edge.core import CommandOutOfLimitsError, InvalidCommandError, JointCommand
from vla_edge.safety import Limiter, SafetySupervisor

CONFIG = load_node_params(
    Path(__file__).resolve().parents[1] / "config" / "safety.yaml", "safety_node", SafetyConfig
)
NAMES = tuple(CONFIG.joint_names)
PERIOD_S = 1.0 / CONFIG.rate_hz
ARRAYS = CONFIG.limit_arrays()
LO = ARRAYS.soft_min
HI = ARRAYS.soft_max
VEL = ARRAYS.velocity_limit_per_s
ACC = ARRAYS.acceleration_limit_per_s2
DEC = ARRAYS.deceleration_limit_per_s2
JERK = ARRAYS.jerk_limit_per_s3
REL_TOL = 1e-6
ABS_TOL = 1e-9


def limit_violations(outputs: list[np.ndarray]) -> list[str]:
    """Finite differences of the output sequence at the tick period, checked against limits."""
    p = np.array(outputs)
    v = np.diff(p, axis=0) / PERIOD_S
    a = np.diff(v, axis=0) / PERIOD_S
    j = np.diff(a, axis=0) / PERIOD_S
    problems = []
    if not np.all(np.isfinite(p)):
        problems.append("non-finite output")
    if np.any(p < LO - ABS_TOL) or np.any(p > HI + ABS_TOL):
        problems.append(f"position out of bounds: {p.min(axis=0)} .. {p.max(axis=0)}")
    if np.any(np.abs(v) > VEL * (1 + REL_TOL) + ABS_TOL):
        problems.append(f"velocity {np.max(np.abs(v) / VEL)} x limit")
    braking = a * v[:-1] < 0.0
    a_limit = np.where(braking, DEC, ACC)
    if np.any(np.abs(a) > a_limit * (1 + REL_TOL) + ABS_TOL):
        problems.append(f"acceleration {np.max(np.abs(a) / a_limit)} x limit")
    if np.any(np.abs(j) > JERK * (1 + REL_TOL) + ABS_TOL):
        problems.append(f"jerk {np.max(np.abs(j) / JERK)} x limit")
    return problems


def test_feasible_smooth_trajectory_passes_through_unchanged() -> None:
    start = 0.3 * np.sin(np.zeros(7))
    limiter = Limiter(CONFIG, start)
    errors = []
    for k in range(300):
        t = k * PERIOD_S
        target = np.full(7, 0.3 * np.sin(2.0 * t) * (1.0 - np.exp(-((t / 0.5) ** 3))))
        target[6] = 0.02
        out = limiter.step(target)
        errors.append(np.max(np.abs(out - target)))
    assert max(errors[100:]) < 1e-9


def test_huge_jump_is_followed_at_the_limits_and_settles_on_the_soft_bound() -> None:
    limiter = Limiter(CONFIG, np.zeros(7))
    outputs = [np.zeros(7)] * 3
    for _ in range(400):
        outputs.append(limiter.step(np.full(7, 1e9)))
    assert limit_violations(outputs) == []
    np.testing.assert_allclose(outputs[-1], HI, atol=1e-9)
    assert limiter.at_rest


def test_arm_at_full_speed_brakes_in_time_before_the_bound() -> None:
    start = LO + 0.01
    limiter = Limiter(CONFIG, start)
    outputs = [start] * 3
    for _ in range(300):
        outputs.append(limiter.step(HI))  # the whole range in one go, at full speed
    assert limit_violations(outputs) == []
    peak = np.max(np.abs(np.diff(np.array(outputs), axis=0)) / PERIOD_S, axis=0)
    np.testing.assert_allclose(peak[:6], VEL[:6], rtol=1e-6)
    assert np.all(np.array(outputs) <= HI + ABS_TOL)


def test_start_outside_the_soft_band_moves_inwards_within_limits() -> None:
    start = ARRAYS.position_max - 0.01  # inside hard, outside soft
    start[6] = 0.02
    limiter = Limiter(CONFIG, start)
    outputs = [start] * 3
    for _ in range(100):
        outputs.append(limiter.step(start + 1.0))
    final = outputs[-1]
    np.testing.assert_allclose(final[:6], HI[:6], atol=1e-9)
    assert np.all(np.diff(np.array(outputs)[:, 0]) <= ABS_TOL)


def test_start_far_outside_the_hard_limits_is_refused() -> None:
    start = np.zeros(7)
    start[1] = 1.9
    with pytest.raises(CommandOutOfLimitsError, match=r"joint2\] = 1.9 outside .*\[-1.8, 1.8\]"):
        Limiter(CONFIG, start)


def test_start_just_past_a_hard_limit_is_clamped_onto_it() -> None:
    start = np.zeros(7)
    start[6] = 0.0402  # gripper range 0.04: 0.5 % beyond
    limiter = Limiter(CONFIG, start)
    assert limiter.positions[6] == 0.04
    assert start[6] == 0.0402  # the caller's array is not modified


def test_non_finite_start_is_refused() -> None:
    start = np.zeros(7)
    start[0] = np.nan
    with pytest.raises(InvalidCommandError, match=r"joint1\] = nan: must be finite"):
        Limiter(CONFIG, start)


# --- property tests ---------------------------------------------------------------------

special = st.sampled_from([np.nan, np.inf, -np.inf, 1e9, -1e9])
fraction = st.floats(-0.3, 1.3, allow_nan=False)  # of the hard range: mostly inside
joint_values = st.lists(
    st.one_of(fraction, special.map(lambda x: ("raw", x))), min_size=7, max_size=7
)
clock_step_s = st.sampled_from([PERIOD_S, PERIOD_S, PERIOD_S, 0.0, -0.05, -PERIOD_S])
tick = st.one_of(
    st.tuples(
        st.just("cmd"),
        joint_values,
        st.sampled_from([0.0, -0.05, -0.5, 0.03, -1e9, np.nan]),
        st.integers(1, 25),
        clock_step_s,
    ),
    st.tuples(st.just("none"), st.just([]), st.just(0.0), st.integers(1, 10), clock_step_s),
)
HARD_MIN = ARRAYS.position_min
HARD_MAX = ARRAYS.position_max


def to_positions(values: list) -> np.ndarray:
    out = np.empty(7)
    for i, value in enumerate(values):
        if isinstance(value, tuple):
            out[i] = value[1]
        else:
            out[i] = HARD_MIN[i] + value * (HARD_MAX[i] - HARD_MIN[i])
    return out


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    start=st.lists(st.floats(0.0, 1.0), min_size=7, max_size=7),
    ticks=st.lists(tick, min_size=1, max_size=12),
)
def test_any_command_stream_keeps_the_output_inside_all_limits(
    start: list[float], ticks: list
) -> None:
    initial = LO + np.array(start) * (HI - LO)
    supervisor = SafetySupervisor(CONFIG, initial)
    outputs = [initial, initial, initial]
    now_s = 0.0
    for kind, values, stamp_offset_s, repeat, clock_step in ticks:
        positions = to_positions(values) if kind == "cmd" else None
        for _ in range(repeat):
            now_s += clock_step  # duplicate and reversed clock readings included
            supervisor.on_joint_state(supervisor.limiter.positions, now_s)
            if positions is None:
                outputs.append(supervisor.hold(now_s))
            else:
                command = JointCommand(now_s + stamp_offset_s, NAMES, positions)
                outputs.append(supervisor.filter(command, now_s))
    assert limit_violations(outputs) == []


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    start=st.lists(st.floats(0.0, 1.0), min_size=7, max_size=7),
    targets=st.lists(
        st.tuples(
            st.lists(st.floats(-1e9, 1e9, allow_nan=False), min_size=7, max_size=7),
            st.integers(1, 30),
            st.booleans(),
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_limiter_alone_keeps_any_finite_target_stream_inside_all_limits(
    start: list[float], targets: list
) -> None:
    initial = LO + np.array(start) * (HI - LO)
    limiter = Limiter(CONFIG, initial)
    outputs = [initial, initial, initial]
    for values, repeat, brake in targets:
        target = np.array(values)
        for _ in range(repeat):
            outputs.append(limiter.brake() if brake and repeat % 3 == 0 else limiter.step(target))
    assert limit_violations(outputs) == []
