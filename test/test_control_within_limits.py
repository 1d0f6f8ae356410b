"""The controller's command inside margin x the safety node's limits, by construction.

Properties (hypothesis) on the package's ``config/safety.yaml`` limits: for any
stream of chunks (jumps between chunks, gripper steps, a NaN chunk refused on
arrival, chunks arriving at any tick) and every merge, the command's finite
differences at the controller rate stay within ``command_limit_margin`` times the
velocity, acceleration (``min(acceleration, deceleration, 2 * jerk * T)``) and
jerk limits, and the safety limiter passes every command unchanged.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vla_edge.bench.soak_report import limited_ticks
from vla_edge.config import ControllerConfig, SafetyConfig, load_node_params
from vla_edge.control.controller import Controller
from vla_edge.control.shaping import (
    CommandLimits,
    CommandShaper,
    command_limits_for,
    load_command_limits,
)
from vla_edge.core.errors import (
    ChunkRejectedError,
    ConfigError,
    MissingJointLimitsError,
    NonFiniteChunkError,
)
from vla_edge.core.types import ActionChunk
from vla_edge.safety.limiter import Limiter

ROOT = Path(__file__).resolve().parents[1]
SAFETY = load_node_params(ROOT / "config" / "safety.yaml", "safety_node", SafetyConfig)
CONTROLLER = load_node_params(
    ROOT / "config" / "controller.yaml", "controller_node", ControllerConfig
)
MARGIN = CONTROLLER.command_limit_margin
LIMITS = command_limits_for(CONTROLLER, SAFETY)
NAMES = tuple(CONTROLLER.joint_names)
PERIOD_S = 1.0 / CONTROLLER.rate_hz
ARRAYS = SAFETY.limit_arrays(CONTROLLER.joint_names)
LO = ARRAYS.soft_min
HI = ARRAYS.soft_max
# the home pose of the tabletop arm, gripper open (at its upper bound)
START = np.array([0.0, 0.0762, 1.8874, 0.0, 1.1779, 0.0, 0.04])
REL_TOL = 1e-9
ABS_TOL = 1e-9


def violations(commands: list[np.ndarray], limits: CommandLimits) -> list[str]:
    """The command's finite differences at the control period against ``limits``."""
    p = np.asarray(commands)
    v = np.diff(p, axis=0) / PERIOD_S
    a = np.diff(v, axis=0) / PERIOD_S
    j = np.diff(a, axis=0) / PERIOD_S
    found = []
    if not np.all(np.isfinite(p)):
        found.append("non-finite command")
    if np.any(p < LO - ABS_TOL) or np.any(p > HI + ABS_TOL):
        found.append(f"position outside the soft band: {p.min(axis=0)} .. {p.max(axis=0)}")
    for name, values, bound in (
        ("velocity", v, limits.velocity),
        ("acceleration", a, limits.acceleration),
        ("jerk", j, limits.jerk),
    ):
        ratio = np.max(np.abs(values) / bound) if values.size else 0.0
        if ratio > 1.0 + REL_TOL:
            found.append(f"{name} {ratio:.6f} x margin limit")
    return found


def _chunk_rows(draw: st.DrawFn, base: np.ndarray) -> np.ndarray:
    """Ten steps from ``base``: a jump, a random walk, a gripper step, inside the soft band."""
    jump = draw(st.floats(0.0, 0.6))
    walk = draw(st.floats(0.0, 0.3))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    steps = base + jump * rng.uniform(-1.0, 1.0, 7) + np.cumsum(rng.normal(0.0, walk, (10, 7)), 0)
    gripper = draw(st.sampled_from(["open", "closed", "walk"]))
    if gripper != "walk":
        steps[:, 6] = HI[6] if gripper == "open" else LO[6]
    return np.clip(steps, LO, HI)


@st.composite
def chunk_streams(draw: st.DrawFn) -> list[tuple[int, float, np.ndarray]]:
    """``(arrival tick, age on arrival [s], positions [10, 7])`` in arrival order."""
    stream = []
    tick = 0
    base = START.copy()
    for _ in range(draw(st.integers(1, 6))):
        tick += draw(st.integers(0, 60))
        positions = _chunk_rows(draw, base)
        if draw(st.booleans()) and draw(st.booleans()):
            positions[draw(st.integers(0, 9)), draw(st.integers(0, 6))] = np.nan
        else:
            base = positions[-1]
        stream.append((tick, draw(st.sampled_from([0.0, 0.05, 0.2])), positions))
    return stream


def _run(merge: str, stream: list[tuple[int, float, np.ndarray]], ticks: int) -> list[np.ndarray]:
    config = CONTROLLER.model_copy(update={"merge": merge})
    controller = Controller(config, START, limits=LIMITS)
    limiter = Limiter(SAFETY, START)
    arrivals: dict[int, list[tuple[float, np.ndarray]]] = {}
    for tick, age_s, positions in stream:
        arrivals.setdefault(tick, []).append((age_s, positions))
    commands = [START.copy()]
    for k in range(ticks):
        now_s = k * PERIOD_S
        for age_s, positions in arrivals.get(k, []):
            chunk = ActionChunk(now_s - age_s, config.dt_action_s, NAMES, positions)
            if np.isnan(positions).any():
                with pytest.raises(NonFiniteChunkError):
                    controller.submit(chunk, now_s)
                continue
            try:
                controller.submit(chunk, now_s)
            except ChunkRejectedError:  # older than the chunk before it: refused, as it must be
                pass
        command = controller.step(now_s).positions
        commands.append(command)
        limiter.step(command)
        assert limiter.limited_joints == 0, f"the safety limiter changed tick {k}"
    return commands


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(merge=st.sampled_from(["replace", "weighted", "ensemble", "prefix"]), stream=chunk_streams())
def test_any_chunk_stream_is_commanded_inside_margin_times_the_limits(merge, stream) -> None:
    ticks = stream[-1][0] + 120  # the last chunk runs out and the hold ramp ends
    assert violations(_run(merge, stream, ticks), LIMITS) == []


@settings(max_examples=200, deadline=None)
@given(
    targets=st.lists(
        st.lists(st.floats(-10.0, 10.0), min_size=7, max_size=7), min_size=3, max_size=60
    ),
    repeats=st.integers(1, 15),
)
def test_the_shaper_keeps_the_limits_for_any_target_stream_even_out_of_the_band(
    targets, repeats
) -> None:
    shaper = CommandShaper(LIMITS, PERIOD_S, START)
    commands = [START.copy()]
    for target in targets:
        for _ in range(repeats):
            commands.append(shaper.step(np.asarray(target)))
    assert violations(commands, LIMITS) == []


def test_a_plan_inside_the_limits_is_commanded_unchanged() -> None:
    shaper = CommandShaper(LIMITS, PERIOD_S, START)
    for k in range(400):
        t = k * PERIOD_S
        plan = START + 0.2 * np.sin(1.5 * t) * (1.0 - np.exp(-((t / 0.4) ** 3)))
        plan[6] = 0.035 + 0.005 * np.cos(1.5 * t)
        command = shaper.step(plan)
        np.testing.assert_array_equal(command, plan)
        assert not shaper.shaped


def test_a_jump_is_joined_within_the_limits_without_overshoot() -> None:
    shaper = CommandShaper(LIMITS, PERIOD_S, START)
    goal = START + np.array([0.3, -0.3, 0.2, 0.5, -0.5, 0.4, -0.02])
    commands = [START.copy()] + [shaper.step(goal) for _ in range(300)]
    assert violations(commands, LIMITS) == []
    np.testing.assert_allclose(commands[-1], goal, atol=1e-12)
    travelled = (np.asarray(commands) - START) / (goal - START)
    assert np.all(travelled <= 1.0 + 1e-9) and np.all(travelled >= -1e-9)


def test_the_limits_are_margin_times_the_safety_limits_and_the_acceleration_two_jerk_t() -> None:
    jerk = ARRAYS.jerk_limit_per_s3
    expected = np.minimum.reduce(
        [
            ARRAYS.acceleration_limit_per_s2,
            ARRAYS.deceleration_limit_per_s2,
            2.0 * jerk / SAFETY.rate_hz,
        ]
    )
    np.testing.assert_allclose(LIMITS.acceleration, MARGIN * expected)
    np.testing.assert_allclose(LIMITS.velocity, MARGIN * ARRAYS.velocity_limit_per_s)
    np.testing.assert_allclose(LIMITS.jerk, MARGIN * jerk)
    np.testing.assert_allclose(LIMITS.position_lo, LO)
    np.testing.assert_allclose(LIMITS.position_hi, HI)


def test_limits_follow_the_controllers_joint_order_and_name_a_missing_joint() -> None:
    reordered = CommandLimits.from_safety(SAFETY, 0.5, ["gripper", "joint1"])
    assert reordered.velocity.tolist() == [0.5 * 0.2, 0.5 * 2.0]
    with pytest.raises(MissingJointLimitsError, match=r"joints \['elbow'\] have no limits"):
        CommandLimits.from_safety(SAFETY, 0.9, ["joint1", "elbow"])
    with pytest.raises(ConfigError, match="command_limit_margin = 1.5"):
        CommandLimits.from_safety(SAFETY, 1.5, NAMES)


def test_margin_zero_or_no_safety_configuration_commands_the_plan_unshaped() -> None:
    assert (
        command_limits_for(CONTROLLER.model_copy(update={"command_limit_margin": 0.0}), SAFETY)
        is None
    )
    assert command_limits_for(CONTROLLER, None) is None
    assert Controller(CONTROLLER, START).shaper is None


def test_the_node_loads_the_limits_from_the_safety_parameter_file_it_names(tmp_path) -> None:
    assert np.array_equal(load_command_limits(CONTROLLER).velocity, LIMITS.velocity)
    data = yaml.safe_load((ROOT / "config" / "safety.yaml").read_text())
    for name, joint in data["safety_node"]["ros__parameters"]["joints"].items():
        joint["velocity_limit_per_s"] = 0.1 if name == "gripper" else 1
    slow = tmp_path / "safety_slow.yaml"
    slow.write_text(yaml.safe_dump(data, sort_keys=False))
    named = CONTROLLER.model_copy(update={"safety_params_file": str(slow)})
    np.testing.assert_allclose(
        load_command_limits(named).velocity, MARGIN * np.array([1] * 6 + [0.1])
    )
    with pytest.raises(ConfigError):
        load_command_limits(
            CONTROLLER.model_copy(update={"safety_params_file": str(tmp_path / "no.yaml")})
        )


def test_shaped_steps_count_the_ticks_the_command_left_the_plan() -> None:
    controller = Controller(
        CONTROLLER.model_copy(update={"merge": "replace"}), START, limits=LIMITS
    )
    jump = np.repeat((START + np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.04]))[None], 10, 0)
    controller.submit(ActionChunk(0.0, 0.1, NAMES, jump), 0.0)
    for k in range(50):
        controller.step(k * PERIOD_S)
    assert 0 < controller.counters["shaped_steps"] <= 50


def test_the_soak_reports_the_safety_nodes_limited_share_overall_and_outside_faults() -> None:
    def sample(t_s: float, ticks: int | None, limited: int | None) -> dict:
        return {"t_s": t_s, "safety": {"ticks": ticks, "limited_ticks": limited}}

    samples = [
        sample(1.0, None, None),  # the node not up yet
        sample(2.0, 100, 1),
        sample(3.0, 200, 11),  # in the fault
        sample(4.0, 50, 0),  # the node restarted: counts from zero
        sample(5.0, 150, 1),
    ]
    out = limited_ticks(samples, [(2.5, 2.8)])
    assert (out["ticks"], out["limited_ticks"]) == (350, 12)
    assert (out["ticks_outside_faults"], out["limited_ticks_outside_faults"]) == (250, 2)
    assert out["share"] == pytest.approx(12 / 350)
    assert out["share_outside_faults"] == pytest.approx(2 / 250)
    assert limited_ticks([], [])["share"] is None
