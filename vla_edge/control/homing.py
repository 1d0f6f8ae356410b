"""Homing: a smooth move of the arm to a home pose, inside the safety node's limits.

The controller's ``~/home`` service plans one trajectory from its own last
commands to the home pose and sends it, one sample per control tick, through
the safety node like any command (as ros2_controllers' JointTrajectoryController
executes a goal from the current state):

* **from rest**: a synchronised minimum-jerk (quintic) profile. Every joint
  starts and ends together; the duration is the shortest on the control
  period's grid whose *sampled* finite differences keep every joint's velocity,
  acceleration and jerk under ``home_limit_margin`` times the safety node's
  limits. The acceleration bound is ``min(acceleration, deceleration,
  2 * jerk * T)``: the safety limiter passes a stream unchanged only below
  ``2 * jerk * T`` (see :mod:`vla_edge.control.shaping`). For a quintic over a
  distance ``d`` the peaks are ``1.875 d / D``, ``5.77 d / D^2`` and
  ``60 d / D^3``, which gives the duration ``D`` directly; the samples are
  checked all the same.
* **from motion** (the arm was following chunks): first each joint's shortest
  jerk-limited stop (:mod:`vla_edge.control.jerk_stop`: the acceleration to the
  braking bound, a hold, a release that brings velocity and acceleration to zero
  together), then the quintic from rest. The stop brakes at ``home_limit_margin``
  of the safety node's acceleration and jerk where that fits, if need be with
  a lead: its first command steps the acceleration by a whole tick's jerk (the
  sampled profile alone brakes most of a tick later). Where it would still pass
  a soft position bound (or the velocity bound) it brakes harder, up to
  ``command_limit_margin`` of the limits (the bounds the controller's command
  already keeps, so the start is inside them), only as much harder as it takes
  to end on the bound. A joint that cannot stop even then is refused by name,
  with the distance its shortest stop needs and the room it has. The samples
  of a profile continuous in acceleration keep its bounds in finite
  differences; they are checked all the same.

The commands are the samples themselves, one per tick, never a clock lookup:
the safety node sees exactly the planned finite differences even when a tick
comes late.

:class:`Homing` follows one trajectory. Its phases: ``idle``; ``moving`` (the
trajectory, then waiting until the measured positions are within
``home_tolerance`` of the home pose); ``done`` (homed, until a new chunk is
accepted: ``idle`` again). An abort (a stop of the safety node, joint states
lost) ends ``moving`` with a jerk-limited stop from wherever the arm is.

:class:`SafetyStopView` is what the controller knows of the safety node's stop
(from ``estop`` and the safety node's ``/diagnostics`` status), to refuse or
abort homing while the safety node holds the arm.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from vla_edge.config.models import ControllerConfig, SafetyConfig
from vla_edge.control.jerk_stop import JerkStop, jerk_limited_stop
from vla_edge.control.shaping import CommandLimits, load_safety_config
from vla_edge.core.errors import VlaEdgeError
from vla_edge.core.stop import StopCategory

# Peaks of the minimum-jerk profile 10 s^3 - 15 s^4 + 6 s^5 and its derivatives on [0, 1].
QUINTIC_PEAK_VELOCITY = 1.875
QUINTIC_PEAK_ACCELERATION = 10.0 / math.sqrt(3.0)
QUINTIC_PEAK_JERK = 60.0
# The longest homing (and stop) planned; a longer one is refused.
MAX_HOMING_DURATION_S = 60.0
MAX_STOP_DURATION_S = 5.0
# Bisections of the braking level between the gentle stop and the hardest, and the
# levels tried evenly above the one found should its samples not fit.
STOP_LEVELS = 8
STOP_BISECTIONS = 24
# Below these the start counts as at rest (the last commands were equal to rounding).
REST_VELOCITY = 1e-9
REST_ACCELERATION = 1e-6
# Relative slack of the sampled-bound check (rounding of the finite differences).
BOUND_SLACK = 1e-9


class HomingError(VlaEdgeError):
    """Base class of the reasons a homing cannot start."""


class HomePoseError(HomingError):
    """The home pose itself is unusable."""

    reason = "home_pose"


class HomePoseLengthError(HomePoseError):
    """The home pose does not have one entry per joint."""

    reason = "home_pose_length"


class NonFiniteHomePoseError(HomePoseError):
    """A home pose entry is NaN or infinite."""

    reason = "home_pose_non_finite"


class HomePoseOutOfLimitsError(HomePoseError):
    """A home pose entry lies outside the safety node's soft position band."""

    reason = "home_pose_out_of_limits"


class HomingUnavailableError(HomingError):
    """Homing has nothing to plan with (no home pose, no limits)."""


class HomingInfeasibleError(HomingError):
    """No trajectory within the longest duration keeps the bounds."""


class StopInfeasibleError(HomingInfeasibleError):
    """A moving joint cannot come to rest inside the stop bounds (names the joint and why).

    Attributes:
        joint: the joint's name.
        travel: the signed distance its shortest stop inside the stop bounds needs
            (towards the soft position bound it passes, if it passes one).
        room: the signed distance from the start to that bound.
    """

    def __init__(self, message: str, joint: str, travel: float, room: float) -> None:
        super().__init__(message)
        self.joint = joint
        self.travel = travel
        self.room = room


# --- limits ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class HomingLimits:
    """The bounds of a homing: its own (with the margin) and the hardest stop's.

    Attributes:
        home: bounds of the move to the home pose (``home_limit_margin`` of the
            limits); a stop from motion brakes at these where it fits.
        stop: the bounds no stop from motion exceeds (the controller's
            ``command_limit_margin`` of the limits: the moving start keeps them).
    """

    home: CommandLimits
    stop: CommandLimits

    @classmethod
    def from_safety(
        cls,
        safety: SafetyConfig,
        margin: float,
        joint_names: Sequence[str],
        stop_margin: float = 1.0,
    ) -> HomingLimits:
        """``margin`` (homing) and ``stop_margin`` (stops) of the limits of ``safety``.

        Raises:
            ConfigError: the safety configuration lacks one of ``joint_names``, or a
                margin is not in ``(0, 1]``.
        """
        return cls(
            home=CommandLimits.from_safety(safety, margin, joint_names),
            stop=CommandLimits.from_safety(safety, stop_margin, joint_names),
        )


def homing_limits_for(config: ControllerConfig, safety: SafetyConfig) -> HomingLimits:
    """The bounds the controller ``config`` homes within, given the safety node's configuration.

    Stops keep ``command_limit_margin`` of the limits (the safety node's limits
    themselves when it is 0: the command is unshaped).
    """
    return HomingLimits.from_safety(
        safety,
        config.home_limit_margin,
        config.joint_names,
        stop_margin=config.command_limit_margin or 1.0,
    )


def load_homing_limits(config: ControllerConfig) -> HomingLimits:
    """The bounds from the safety parameter file (:func:`.shaping.load_safety_config`).

    Raises:
        ConfigError: the file is missing, invalid or lacks a joint of the controller.
    """
    return homing_limits_for(config, load_safety_config(config))


def check_home_pose(
    pose: Sequence[float] | np.ndarray,
    joint_names: Sequence[str],
    limits: CommandLimits,
) -> np.ndarray:
    """``pose`` as an array, if it has one finite entry per joint inside the soft position band.

    Raises:
        HomePoseLengthError: not one entry per joint.
        NonFiniteHomePoseError: an entry is NaN or infinite (names the joint).
        HomePoseOutOfLimitsError: an entry lies outside the safety node's soft
            position band (names the joint, the value and the bound).
    """
    values = np.asarray(pose, dtype=np.float64).reshape(-1)
    n = len(joint_names)
    if values.shape != (n,):
        raise HomePoseLengthError(
            f"home pose has {values.size} entries, expected {n} (one per joint of "
            f"{list(joint_names)})"
        )
    for i, joint in enumerate(joint_names):
        value = float(values[i])
        if not math.isfinite(value):
            raise NonFiniteHomePoseError(f"home pose of {joint} = {value}: must be finite")
        lo, hi = float(limits.position_lo[i]), float(limits.position_hi[i])
        if value < lo:
            raise HomePoseOutOfLimitsError(
                f"home pose of {joint} = {value} is below the lower bound {lo} "
                "(the safety node's position_min + soft_margin)"
            )
        if value > hi:
            raise HomePoseOutOfLimitsError(
                f"home pose of {joint} = {value} is above the upper bound {hi} "
                "(the safety node's position_max - soft_margin)"
            )
    return values


# --- planning -------------------------------------------------------------------------------


@dataclass(frozen=True)
class MotionState:
    """Where the command is: positions and the finite-difference velocity and acceleration.

    Attributes:
        positions: ``[n]`` the last command.
        velocities: ``[n]`` ``(p_k - p_{k-1}) / T``.
        accelerations: ``[n]`` ``(v_k - v_{k-1}) / T``.
    """

    positions: np.ndarray
    velocities: np.ndarray
    accelerations: np.ndarray

    @classmethod
    def at_rest(cls, positions: Sequence[float] | np.ndarray) -> MotionState:
        """Standing still at ``positions``."""
        p = np.asarray(positions, dtype=np.float64).copy()
        return cls(p, np.zeros_like(p), np.zeros_like(p))

    @classmethod
    def from_commands(cls, commands: Sequence[np.ndarray], period_s: float) -> MotionState:
        """The state after the commands ``commands`` (oldest first; the last three count).

        Fewer than three commands: the missing ones are taken equal to the oldest
        given (the command started at rest).

        Raises:
            HomingUnavailableError: no command yet.
        """
        if len(commands) == 0:
            raise HomingUnavailableError("no command yet: the start of the homing is unknown")
        rows = [np.asarray(c, dtype=np.float64) for c in list(commands)[-3:]]
        while len(rows) < 3:
            rows.insert(0, rows[0])
        p2, p1, p0 = rows[2], rows[1], rows[0]
        v = (p2 - p1) / period_s
        a = (p2 - 2.0 * p1 + p0) / (period_s * period_s)
        return cls(p2.copy(), v, a)

    @property
    def at_rest_now(self) -> bool:
        """Whether the velocity and acceleration are zero (to rounding)."""
        return bool(
            np.all(np.abs(self.velocities) <= REST_VELOCITY)
            and np.all(np.abs(self.accelerations) <= REST_ACCELERATION)
        )

    def history(self, period_s: float) -> np.ndarray:
        """``[2, n]``: the two commands before ``positions`` that give this state."""
        p_1 = self.positions - self.velocities * period_s
        p_2 = p_1 - (self.velocities - self.accelerations * period_s) * period_s
        return np.stack([p_2, p_1])


@dataclass(frozen=True)
class HomingTrajectory:
    """Samples at the control period, row 0 the start (already commanded), the last the goal.

    Attributes:
        positions: ``[N + 1, n]``.
        period_s: time between two samples (the control period).
        stop_steps: how many of the ``N`` steps bring a moving start to rest first.
    """

    positions: np.ndarray
    period_s: float
    stop_steps: int = 0

    @property
    def steps(self) -> int:
        """Commands to send (the samples after the start)."""
        return len(self.positions) - 1

    @property
    def duration_s(self) -> float:
        """``steps * period_s``."""
        return self.steps * self.period_s

    @property
    def goal(self) -> np.ndarray:
        """The last sample."""
        return self.positions[-1].copy()


def quintic_samples(
    start: MotionState, goal: np.ndarray, steps: int, period_s: float
) -> np.ndarray:
    """``[steps + 1, n]`` samples of the quintic from ``start`` to rest at ``goal``.

    The continuous start conditions are chosen so that the *sampled* stream
    continues the commands before it: velocity ``v + a T / 2`` (the backward
    difference is the velocity half a tick earlier) and acceleration ``a``.
    Row 0 is the start and the last row the goal, both exactly.
    """
    duration_s = steps * period_s
    p0 = start.positions
    v0 = (start.velocities + 0.5 * start.accelerations * period_s) * duration_s
    a0 = start.accelerations * duration_s * duration_s
    h = np.asarray(goal, dtype=np.float64) - p0
    c3 = 10.0 * h - 6.0 * v0 - 1.5 * a0
    c4 = -15.0 * h + 8.0 * v0 + 1.5 * a0
    c5 = 6.0 * h - 3.0 * v0 - 0.5 * a0
    s = (np.arange(steps + 1, dtype=np.float64) / steps)[:, None]
    samples = p0 + s * (v0 + s * (0.5 * a0 + s * (c3 + s * (c4 + s * c5))))
    samples[0] = p0
    samples[-1] = goal
    return samples


def joints_within_bounds(
    samples: np.ndarray, history: np.ndarray, limits: CommandLimits, period_s: float
) -> np.ndarray:
    """``[n]``: whether each joint's commanded stream keeps ``limits``.

    The stream is the two commands before (``history``), the samples and three
    ticks of holding the last sample (the end seam). Its finite differences at
    ``period_s`` keep the velocity, acceleration and jerk bounds, and every
    sample lies inside the soft position band (or between the start and the
    band, if the start is outside it).
    """
    stream = np.vstack([history, samples, samples[-1:], samples[-1:], samples[-1:]])
    v = np.diff(stream, axis=0) / period_s
    a = np.diff(v, axis=0) / period_s
    j = np.diff(a, axis=0) / period_s
    slack = 1.0 + BOUND_SLACK
    lo = np.minimum(limits.position_lo, samples[0])
    hi = np.maximum(limits.position_hi, samples[0])
    return (
        np.all(np.abs(v) <= limits.velocity * slack, axis=0)
        & np.all(np.abs(a) <= limits.acceleration * slack, axis=0)
        & np.all(np.abs(j) <= limits.jerk * slack, axis=0)
        & np.all(samples >= lo, axis=0)
        & np.all(samples <= hi, axis=0)
    )


def within_bounds(
    samples: np.ndarray, history: np.ndarray, limits: CommandLimits, period_s: float
) -> bool:
    """Whether every joint's commanded stream keeps ``limits`` (:func:`joints_within_bounds`)."""
    return bool(np.all(joints_within_bounds(samples, history, limits, period_s)))


def rest_to_rest_steps(distance: np.ndarray, limits: CommandLimits, period_s: float) -> int:
    """Ticks of the shortest quintic over ``distance`` whose continuous peaks keep ``limits``."""
    d = np.abs(np.asarray(distance, dtype=np.float64))
    duration_s = float(
        np.max(
            np.maximum.reduce(
                [
                    QUINTIC_PEAK_VELOCITY * d / limits.velocity,
                    np.sqrt(QUINTIC_PEAK_ACCELERATION * d / limits.acceleration),
                    np.cbrt(QUINTIC_PEAK_JERK * d / limits.jerk),
                ]
            )
        )
    )
    return max(1, math.ceil(duration_s / period_s - 1e-9))


def _search_steps(
    first: int,
    last: int,
    plan: Callable[[int], np.ndarray],
    history: np.ndarray,
    limits: CommandLimits,
    period_s: float,
) -> tuple[int, np.ndarray] | None:
    """The first step count from ``first`` up to ``last`` whose samples keep ``limits``."""
    steps = max(1, first)
    while steps <= last:
        samples = plan(steps)
        if within_bounds(samples, history, limits, period_s):
            return steps, samples
        steps += max(1, steps // 50)
    return None


def _joint_limits(limits: CommandLimits, joint: int) -> CommandLimits:
    """The bounds of one joint, as one-entry arrays."""
    pick = slice(joint, joint + 1)
    return CommandLimits(
        velocity=limits.velocity[pick],
        acceleration=limits.acceleration[pick],
        jerk=limits.jerk[pick],
        position_lo=limits.position_lo[pick],
        position_hi=limits.position_hi[pick],
    )


@dataclass(frozen=True)
class _JointStopPlanner:
    """One moving joint's stop, braking at a level between the gentle and the hardest bounds.

    Level 0 brakes at the homing's own acceleration and jerk bounds (``home``),
    level 1 at the stop bounds (``stop``); levels between interpolate both.

    A sampled profile starts its jerk at the start, where the commands can
    change their acceleration by a whole tick's jerk at once (the profile's
    first sample changes it by a sixth of that). With ``lead`` the first
    command takes that whole step (towards the profile's first phase, not past
    its end) and the profile starts from there: the stop brakes a tick sooner
    (a start at the speed bound still accelerating, as the command shaper
    leaves it, needs that).
    """

    position: float
    velocity: float
    acceleration: float
    history: np.ndarray
    bounds: CommandLimits
    gentle_acceleration: float
    gentle_jerk: float
    period_s: float

    def profile(self, level: float, lead: bool) -> tuple[JerkStop, list[float]]:
        """The shortest stop at braking ``level``, after the led command (if any)."""
        hard_a, hard_j = float(self.bounds.acceleration[0]), float(self.bounds.jerk[0])
        acceleration = self.gentle_acceleration + level * (hard_a - self.gentle_acceleration)
        jerk = self.gentle_jerk + level * (hard_j - self.gentle_jerk)
        stop = jerk_limited_stop(
            self.position, self.velocity, self.acceleration, acceleration, jerk
        )
        if not lead:
            return stop, []
        t = self.period_s
        a1 = self.acceleration + stop.jerks[0] * min(t, stop.durations_s[0])
        v1 = self.commanded_velocity + a1 * t
        p1 = self.position + v1 * t
        return jerk_limited_stop(p1, v1 + 0.5 * a1 * t, a1, acceleration, jerk), [p1]

    def column(self, level: float, lead: bool) -> np.ndarray | None:
        """``[steps + 1]`` samples of the stop at ``level``; ``None`` if they leave the bounds."""
        column = self.samples(level, lead)
        if column is None:
            return None
        ok = joints_within_bounds(
            column[:, None], self.history[:, None], self.bounds, self.period_s
        )
        return column if bool(ok[0]) else None

    def samples(self, level: float, lead: bool) -> np.ndarray | None:
        """The stop's samples, unchecked; ``None`` if it takes too long."""
        stop, led = self.profile(level, lead)
        if not stop.duration_s <= MAX_STOP_DURATION_S:
            return None
        steps = max(1, math.ceil(stop.duration_s / self.period_s))
        tail = stop.positions_at(np.arange(steps + 1, dtype=np.float64) * self.period_s)
        return np.concatenate([[self.position], led, tail[1:]])

    def fits_in_closed_form(self, level: float, lead: bool) -> bool:
        """Whether the stop at ``level`` keeps the speed bound and ends inside the band.

        The continuous profile's own figures (and the led command's), cheap: the
        level is searched on them.
        """
        stop, led = self.profile(level, lead)
        lo = min(float(self.bounds.position_lo[0]), self.position)
        hi = max(float(self.bounds.position_hi[0]), self.position)
        speed = float(self.bounds.velocity[0]) * (1.0 + BOUND_SLACK)
        return (
            stop.duration_s <= MAX_STOP_DURATION_S
            and stop.peak_speed <= speed
            and all(abs(p - self.position) <= speed * self.period_s for p in led)
            and all(lo <= p <= hi for p in led)
            and lo <= stop.end_position <= hi
        )

    def gentlest(self) -> np.ndarray | None:
        """The samples of the gentlest stop that keeps the bounds; ``None`` if none does.

        Level 0 if it fits (without the lead, then with it); else, without the
        lead and then with it, the level where the stop's closed form just keeps
        the speed bound and the band (bisected: a stop limited by a position
        bound ends on it), its samples checked; should they not fit (a start that
        turns back first), evenly harder levels up to 1.
        """
        for lead in (False, True):
            fits = self.column(0.0, lead)
            if fits is not None:
                return fits
        for lead in (False, True):
            failed, good = 0.0, 1.0
            for _ in range(STOP_BISECTIONS):
                middle = 0.5 * (failed + good)
                if self.fits_in_closed_form(middle, lead):
                    good = middle
                else:
                    failed = middle
            for level in np.linspace(good, 1.0, STOP_LEVELS + 1):
                fits = self.column(float(level), lead)
                if fits is not None:
                    return fits
        return None

    def refusal(self, name: str) -> StopInfeasibleError:
        """Why even the hardest stop leaves the bounds: what it needs against what there is."""
        p0 = self.position
        lo = min(float(self.bounds.position_lo[0]), p0)
        hi = max(float(self.bounds.position_hi[0]), p0)
        hardest, led = self.profile(1.0, lead=True)
        steps = max(1, math.ceil(min(hardest.duration_s, MAX_STOP_DURATION_S) / self.period_s))
        tail = hardest.positions_at(np.arange(steps + 1, dtype=np.float64) * self.period_s)
        column = np.concatenate([[p0], led, tail[1:]])
        stream = np.concatenate([self.history, column, np.repeat(column[-1], 3)])
        v = np.diff(stream) / self.period_s
        a = np.diff(v) / self.period_s
        j = np.diff(a) / self.period_s
        travel = float(column[-1]) - p0
        room = (hi if travel > 0.0 else lo) - p0
        slack = 1.0 + BOUND_SLACK
        if float(np.max(column)) > hi or float(np.min(column)) < lo:
            upper = float(np.max(column)) > hi
            side, bound = ("upper", hi) if upper else ("lower", lo)
            travel = (float(np.max(column)) if upper else float(np.min(column))) - p0
            room = bound - p0
            why = (
                f"its shortest stop needs {abs(travel):.4g} towards the {side} soft bound "
                f"{bound:.4g}, {abs(room):.4g} away"
            )
        elif not hardest.duration_s <= MAX_STOP_DURATION_S:
            why = f"its shortest stop takes {hardest.duration_s:.3g} s > {MAX_STOP_DURATION_S} s"
        elif float(np.max(np.abs(v))) > float(self.bounds.velocity[0]) * slack:
            why = (
                f"its shortest stop reaches the speed {float(np.max(np.abs(v))):.4g}, above "
                f"the stop bound {float(self.bounds.velocity[0]):.4g}"
            )
        elif float(np.max(np.abs(a))) > float(self.bounds.acceleration[0]) * slack:
            why = (
                f"its acceleration {float(np.max(np.abs(a))):.4g} is above the stop bound "
                f"{float(self.bounds.acceleration[0]):.4g}"
            )
        else:
            why = (
                f"its jerk {float(np.max(np.abs(j))):.4g} is above the stop bound "
                f"{float(self.bounds.jerk[0]):.4g}"
            )
        return StopInfeasibleError(
            f"{name} has no stop inside the stop bounds (command_limit_margin of the safety "
            f"node's limits) from velocity {self.commanded_velocity:.4g} and acceleration "
            f"{self.acceleration:.4g} at {p0:.4g}: {why}; home again once the arm holds",
            joint=name,
            travel=travel,
            room=room,
        )

    @property
    def commanded_velocity(self) -> float:
        """The last commanded (finite-difference) velocity."""
        return float((self.position - self.history[-1]) / self.period_s)


def plan_stop(
    start: MotionState,
    limits: HomingLimits,
    period_s: float,
    joint_names: Sequence[str] | None = None,
) -> HomingTrajectory:
    """Each moving joint's jerk-limited stop from ``start`` (module docstring), then it holds.

    Each joint stops on its own (a controlled stop, not a synchronised move) at
    the gentlest braking level whose samples keep the stop bounds, the two
    commands before and three ticks of holding after included
    (:func:`joints_within_bounds`); the trajectory lasts as long as the longest.
    The start's continuous velocity is ``v + a T / 2`` (the backward difference
    is the velocity half a tick earlier), so the stream continues the commands
    before it with their acceleration.

    Raises:
        StopInfeasibleError: a joint cannot stop inside the stop bounds (moving
            fast close to a position bound): names it, the distance its
            shortest stop needs and the room to the bound.
    """
    p0 = start.positions
    moving = (np.abs(start.velocities) > REST_VELOCITY) | (
        np.abs(start.accelerations) > REST_ACCELERATION
    )
    if not np.any(moving):
        return HomingTrajectory(p0[None, :].copy(), period_s)
    history = start.history(period_s)
    velocity = start.velocities + 0.5 * start.accelerations * period_s
    columns: dict[int, np.ndarray] = {}
    for joint in np.flatnonzero(moving):
        joint = int(joint)
        planner = _JointStopPlanner(
            position=float(p0[joint]),
            velocity=float(velocity[joint]),
            acceleration=float(start.accelerations[joint]),
            history=history[:, joint],
            bounds=_joint_limits(limits.stop, joint),
            gentle_acceleration=float(
                min(limits.home.acceleration[joint], limits.stop.acceleration[joint])
            ),
            gentle_jerk=float(min(limits.home.jerk[joint], limits.stop.jerk[joint])),
            period_s=period_s,
        )
        column = planner.gentlest()
        if column is None:
            name = joint_names[joint] if joint_names is not None else f"joint {joint}"
            raise planner.refusal(name)
        columns[joint] = column
    total = max(len(column) - 1 for column in columns.values())
    positions = np.repeat(p0[None, :], total + 1, axis=0)
    for joint, column in columns.items():
        positions[: len(column), joint] = column
        positions[len(column) :, joint] = column[-1]
    return HomingTrajectory(positions, period_s, stop_steps=total)


def plan_homing(
    start: MotionState,
    home: Sequence[float] | np.ndarray,
    limits: HomingLimits,
    period_s: float,
    joint_names: Sequence[str],
) -> HomingTrajectory:
    """The homing trajectory from ``start`` to rest at ``home`` (module docstring).

    Raises:
        HomePoseError: ``home`` is not one finite value per joint inside the soft band.
        HomingInfeasibleError: no trajectory within the longest duration keeps the bounds.
    """
    goal = check_home_pose(home, joint_names, limits.home)
    if start.positions.shape != goal.shape or not np.all(np.isfinite(start.positions)):
        raise HomingUnavailableError(
            f"start positions {start.positions.tolist()}: expected {goal.size} finite values"
        )
    stop = plan_stop(start, limits, period_s, joint_names)
    rest = MotionState.at_rest(stop.goal)
    first = rest_to_rest_steps(goal - rest.positions, limits.home, period_s)

    def plan(steps: int) -> np.ndarray:
        return quintic_samples(rest, goal, steps, period_s)

    found = _search_steps(
        first,
        int(MAX_HOMING_DURATION_S / period_s),
        plan,
        rest.history(period_s),
        limits.home,
        period_s,
    )
    if found is None:
        raise HomingInfeasibleError(
            f"no homing within {MAX_HOMING_DURATION_S} s keeps home_limit_margin of the "
            f"safety node's limits from {np.round(rest.positions, 4).tolist()} to "
            f"{np.round(goal, 4).tolist()}"
        )
    positions = np.vstack([stop.positions, found[1][1:]])
    return HomingTrajectory(positions, period_s, stop_steps=stop.steps)


# --- following ------------------------------------------------------------------------------


class HomingPhase(StrEnum):
    """Where a homing stands (the ``homing`` value on ``/diagnostics``)."""

    IDLE = "idle"
    MOVING = "moving"
    DONE = "done"


class Homing:
    """One homing at a time, one sample per control tick (ROS-free; the controller node drives it).

    Args:
        limits: the bounds (:func:`load_homing_limits`).
        period_s: the control period.
        joint_names: the joints, in command order.
        tolerance: largest ``|measured - home|`` of any joint that counts as homed.
        settle_timeout_s: how long after the trajectory's end the measured
            positions may take to come within ``tolerance``.
    """

    def __init__(
        self,
        limits: HomingLimits,
        period_s: float,
        joint_names: Sequence[str],
        tolerance: float,
        settle_timeout_s: float,
    ) -> None:
        self.limits = limits
        self.period_s = float(period_s)
        self.joint_names = tuple(joint_names)
        self.tolerance = float(tolerance)
        self.settle_timeout_s = float(settle_timeout_s)
        self.phase = HomingPhase.IDLE
        self.goal: np.ndarray | None = None
        self.last_result = ""
        self._trajectory: HomingTrajectory | None = None
        self._next = 0
        self._started_s = 0.0
        self._ended_s: float | None = None
        self.counters: dict[str, int] = {
            "started": 0,
            "done": 0,
            "aborted": 0,
            "failed": 0,
            "refused": 0,
            "chunks_refused": 0,
        }

    # --- queries ----------------------------------------------------------------------------

    @property
    def following(self) -> bool:
        """Whether a trajectory (homing or abort stop) still has samples to send."""
        return self._trajectory is not None and self._next <= self._trajectory.steps

    @property
    def accepts_chunks(self) -> bool:
        """Chunks are refused while a trajectory runs and until the arm is homed."""
        return not self.following and self.phase != HomingPhase.MOVING

    @property
    def homed(self) -> bool:
        """Whether the arm reached the home pose (and no chunk has moved it since)."""
        return self.phase == HomingPhase.DONE

    def remaining_s(self) -> float:
        """Time left on the trajectory (0 once it has ended)."""
        if not self.following:
            return 0.0
        assert self._trajectory is not None
        return (self._trajectory.steps - self._next + 1) * self.period_s

    def status(self) -> dict[str, object]:
        """Key/values for ``/diagnostics`` (``homing``, ``homing.remaining_s``, ...)."""
        return {
            "homing": self.phase.value,
            "homing.remaining_s": round(self.remaining_s(), 3),
            "homing.last_result": self.last_result,
            **{f"homing.{key}": value for key, value in self.counters.items()},
        }

    # --- transitions ------------------------------------------------------------------------

    def start(self, start: MotionState, home: np.ndarray, now_s: float) -> HomingTrajectory:
        """Plan from ``start`` (the last commands) to ``home`` and begin following it.

        Raises:
            HomingError: a subclass naming why (the phase does not change).
        """
        trajectory = plan_homing(start, home, self.limits, self.period_s, self.joint_names)
        self._trajectory = trajectory
        self._next = 1
        self._started_s = now_s
        self._ended_s = None
        self.goal = trajectory.goal
        self.phase = HomingPhase.MOVING
        self.counters["started"] += 1
        return trajectory

    def next_command(self, now_s: float) -> np.ndarray | None:
        """The sample for this tick; ``None`` when no trajectory runs."""
        if not self.following:
            return None
        assert self._trajectory is not None
        sample = self._trajectory.positions[self._next].copy()
        self._next += 1
        if not self.following:
            self._ended_s = now_s
        return sample

    def update(self, measured: np.ndarray | None, now_s: float) -> None:
        """After the trajectory: ``done`` once ``measured`` is within the tolerance of home.

        Fails (``idle``, counted) if it is not within ``settle_timeout_s``.
        """
        if self.phase != HomingPhase.MOVING or self.following or self.goal is None:
            return
        ended_s = self._ended_s if self._ended_s is not None else now_s
        if measured is not None:
            error = np.abs(np.asarray(measured, dtype=np.float64) - self.goal)
            if float(np.max(error)) <= self.tolerance:
                self.phase = HomingPhase.DONE
                self.counters["done"] += 1
                self.last_result = f"homed in {now_s - self._started_s:.2f} s"
                return
        if now_s - ended_s > self.settle_timeout_s:
            self.phase = HomingPhase.IDLE
            self.counters["failed"] += 1
            if measured is None:
                why = "no measured positions"
            else:
                worst = int(np.argmax(error))
                why = (
                    f"{self.joint_names[worst]} is {float(error[worst]):.4f} from home "
                    f"(home_tolerance = {self.tolerance})"
                )
            self.last_result = f"failed: {why} {self.settle_timeout_s} s after the trajectory ended"

    def abort(self, reason: str, state: MotionState) -> None:
        """End ``moving``: a jerk-limited stop from ``state`` replaces the rest of the trajectory.

        Nothing happens outside ``moving``. If no stop keeps the limits the
        trajectory simply ends (the caller holds at the last command).
        """
        if self.phase != HomingPhase.MOVING:
            return
        self.phase = HomingPhase.IDLE
        self.counters["aborted"] += 1
        self.last_result = f"aborted: {reason}"
        if not self.following:
            return
        try:
            stop = plan_stop(state, self.limits, self.period_s, self.joint_names)
        except HomingInfeasibleError:
            self._trajectory = None
            return
        self._trajectory = stop
        self._next = 1
        self._ended_s = None

    def refuse(self, why: str) -> None:
        """A home request was refused (counted; ``last_result`` says why)."""
        self.counters["refused"] += 1
        self.last_result = f"refused: {why}"

    def refuse_chunk(self) -> None:
        """A chunk arrived while homing (counted, not executed)."""
        self.counters["chunks_refused"] += 1

    def leave_home(self) -> None:
        """A chunk was accepted: the arm leaves the home pose (``done`` -> ``idle``)."""
        if self.phase == HomingPhase.DONE:
            self.phase = HomingPhase.IDLE


# --- the safety node's stop, as the controller sees it --------------------------------------


def refusing_stop(state: str | None) -> StopCategory | None:
    """The safety node's ``state`` if it is a stop homing is refused under (category 1 / 0).

    ``None`` for no stop, a category-2 hold, or a state this version does not know.
    """
    try:
        category = StopCategory(state)
    except ValueError:
        return None
    return category if category.severity >= StopCategory.CAT1.severity else None


class SafetyStopView:
    """What the controller knows of the safety node's stop.

    Two sources: ``estop`` (at once: a press latches the safety node) and the
    safety node's ``/diagnostics`` status (its ``state`` and ``estop_latched``,
    once a second). A press counts until a status stamped after it shows the
    latch cleared. A category-2 state (no command yet, awaiting a command after
    a reset) is not a stop here: the next command, a homing one included, clears
    it. Before the first status nothing is known and nothing refused.

    Args:
        max_status_age_s: a status older than this (the safety node silent) is a stop.
    """

    def __init__(self, max_status_age_s: float) -> None:
        self.max_status_age_s = float(max_status_age_s)
        self._estop_s: float | None = None
        self._state: str | None = None
        self._reasons = ""
        self._received_s: float | None = None

    def on_estop(self, now_s: float) -> None:
        """``estop`` true arrived at ``now_s``."""
        self._estop_s = now_s

    def on_status(
        self, state: str, reasons: str, estop_latched: bool, stamp_s: float, now_s: float
    ) -> None:
        """A safety node status stamped ``stamp_s`` arrived at ``now_s``."""
        self._state = state
        self._reasons = reasons
        self._received_s = now_s
        if self._estop_s is not None and stamp_s > self._estop_s and not estop_latched:
            self._estop_s = None

    def stop_reason(self, now_s: float) -> str | None:
        """Why the safety node holds the arm now (``None``: it does not, as far as known)."""
        if self._estop_s is not None:
            return "the e-stop was pressed (latched until safety/reset)"
        if self._received_s is None:
            return None
        age_s = now_s - self._received_s
        if age_s > self.max_status_age_s:
            return f"no status from the safety node for {age_s:.1f} s"
        category = refusing_stop(self._state)
        if category is not None:
            return f"the safety node holds a {category.value} stop ({self._reasons})"
        return None
