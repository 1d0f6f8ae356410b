"""Per-joint position, velocity, acceleration/deceleration and jerk limiting.

What is limited is the *output* trajectory, sampled at the fixed tick period
``T = 1 / rate_hz``. The state is the previous outputs as finite differences:
``v_k = (p_k - p_{k-1}) / T``, ``a_k = (v_k - v_{k-1}) / T``. Each tick picks
``a_k`` such that

* ``|a_k - a_{k-1}| <= jerk * T``;
* ``|a_k| <= deceleration`` when braking (``a_k * v_{k-1} < 0``), otherwise
  ``|a_k| <= acceleration``;
* ``|v_k| <= velocity`` and ``lo <= p_k <= hi`` (the soft bounds:
  ``position_min + soft_margin`` .. ``position_max - soft_margin``);
* the new state is *viable*: the brake policy below, started from it, comes to
  rest without breaking any of these limits. Positions are therefore kept
  together with the deceleration and jerk limits: the arm brakes in time.

The brake policy is a deterministic function of ``(v, a)`` (most braking
that does not overshoot zero velocity while ramping the acceleration back to
zero), so the brake step from a viable state leads to a viable state: if no
better candidate is viable, braking always is, whatever the input stream.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vla_edge.config.models import SafetyConfig
from vla_edge.core.errors import CommandOutOfLimitsError, InvalidCommandError

REST_VELOCITY = 1e-12
REST_ACCELERATION = 1e-9
_BISECT_ITERATIONS = 12
# Gain closing the lag behind a target (1/s): slow against the jerk limits, so
# the limited response settles without ringing.
LAG_GAIN_PER_S = 10.0
# A measured start may sit just past a hard limit (joint limits in physics are
# soft constraints): up to this fraction of the range it is clamped onto the limit.
INITIAL_TOLERANCE_FRACTION = 0.01


@dataclass(frozen=True)
class JointLimits:
    """Limits of one joint; ``lo``/``hi`` are the soft position bounds."""

    lo: float
    hi: float
    velocity: float
    acceleration: float
    deceleration: float
    jerk: float


def accel_interval(v: float, a: float, lim: JointLimits, period_s: float) -> tuple[float, float]:
    """Admissible next acceleration given the previous velocity and acceleration."""
    step = lim.jerk * period_s
    lo = a - step
    hi = a + step
    if v > 0.0:
        lo = max(lo, -lim.deceleration)
        hi = min(hi, lim.acceleration)
    elif v < 0.0:
        lo = max(lo, -lim.acceleration)
        hi = min(hi, lim.deceleration)
    else:
        lo = max(lo, -lim.acceleration)
        hi = min(hi, lim.acceleration)
    return lo, hi


def brake_acceleration(v: float, a: float, lim: JointLimits, period_s: float) -> float | None:
    """Next acceleration of the brake policy (``None`` if no admissible one exists).

    In the frame where ``v >= 0``: the most negative admissible ``a_k`` such that
    ramping the acceleration back to zero at full jerk does not carry the
    velocity below zero. With ``a_k = -x * J * T`` and ``n = ceil(x) - 1`` the
    velocity left after the ramp is ``v - J T^2 (x (n + 1) - n (n + 1) / 2)``;
    it is zero for ``x = c / (n + 1) + n / 2`` with ``c = v / (J T^2)``.
    """
    sign = 1.0 if v >= 0.0 else -1.0
    vm = v * sign
    am = a * sign
    lo, hi = accel_interval(vm, am, lim, period_s)
    if lo > hi:
        return None
    jt2 = lim.jerk * period_s * period_s
    c = vm / jt2
    if c <= 0.0:
        target = 0.0
    else:
        n = int((math.sqrt(8.0 * c + 1.0) - 1.0) * 0.5)
        while n > 0 and n * (n + 1) * 0.5 >= c:
            n -= 1
        while (n + 1) * (n + 2) * 0.5 < c:
            n += 1
        x = c / (n + 1) + n * 0.5
        target = -x * lim.jerk * period_s
    ak = lo if target < lo else (hi if target > hi else target)
    return ak * sign


def brake_is_viable(
    p: float,
    v: float,
    a: float,
    lim: JointLimits,
    lo: float,
    hi: float,
    period_s: float,
    max_steps: int,
) -> bool:
    """Simulate the brake policy from ``(p, v, a)``; True if it rests within all limits."""
    for _ in range(max_steps):
        if abs(v) <= REST_VELOCITY and abs(a) <= REST_ACCELERATION:
            return True
        ak = brake_acceleration(v, a, lim, period_s)
        if ak is None:
            return False
        v = v + ak * period_s
        if abs(v) > lim.velocity:
            return False
        p = p + v * period_s
        if p < lo or p > hi:
            return False
        a = ak
    return False


def clearly_viable(
    p: float, v: float, a: float, lim: JointLimits, lo: float, hi: float, period_s: float
) -> bool:
    """Cheap sufficient test: far from the bounds and from the velocity limit.

    Bounds the brake policy's peak speed by ``|v| + a^2 / (2 J) + |a| T`` and
    its travel by twice peak speed times a generous stopping time.
    """
    av = abs(v)
    aa = abs(a)
    j = lim.jerk
    v_peak = av + aa * aa / (2.0 * j) + aa * period_s
    if v_peak > lim.velocity:
        return False
    t_stop_s = (aa + 2.0 * lim.deceleration) / j + v_peak / lim.deceleration + 4.0 * period_s
    travel = 2.0 * v_peak * t_stop_s
    return lo + travel <= p <= hi - travel


class Limiter:
    """Limits a stream of position targets, one call per tick of ``1 / rate_hz``."""

    def __init__(self, config: SafetyConfig, initial_positions: np.ndarray) -> None:
        self.period_s = 1.0 / config.rate_hz
        self.joint_names = tuple(config.joint_names)
        n = len(self.joint_names)
        initial = np.array(initial_positions, dtype=np.float64)
        if initial.shape != (n,):
            raise InvalidCommandError(
                f"initial_positions has shape {initial.shape}, expected ({n},) for {n} joints"
            )
        arrays = config.limit_arrays()
        self.hard_min = [float(x) for x in arrays.position_min]
        self.hard_max = [float(x) for x in arrays.position_max]
        self.limits: list[JointLimits] = []
        for i, name in enumerate(self.joint_names):
            p0 = float(initial[i])
            if not math.isfinite(p0):
                raise InvalidCommandError(f"initial_positions[{name}] = {p0}: must be finite")
            tolerance = INITIAL_TOLERANCE_FRACTION * (self.hard_max[i] - self.hard_min[i])
            if not self.hard_min[i] - tolerance <= p0 <= self.hard_max[i] + tolerance:
                raise CommandOutOfLimitsError(
                    f"initial_positions[{name}] = {p0} outside [position_min, position_max] = "
                    f"[{self.hard_min[i]}, {self.hard_max[i]}] by more than {tolerance:.6g}"
                )
            initial[i] = min(max(p0, self.hard_min[i]), self.hard_max[i])
            self.limits.append(
                JointLimits(
                    lo=float(arrays.soft_min[i]),
                    hi=float(arrays.soft_max[i]),
                    velocity=float(arrays.velocity_limit_per_s[i]),
                    acceleration=float(arrays.acceleration_limit_per_s2[i]),
                    deceleration=float(arrays.deceleration_limit_per_s2[i]),
                    jerk=float(arrays.jerk_limit_per_s3[i]),
                )
            )
        # Starting outside the soft band is allowed; the band widens to include the
        # start and narrows back as the output moves inwards.
        self._lo = [min(lim.lo, float(initial[i])) for i, lim in enumerate(self.limits)]
        self._hi = [max(lim.hi, float(initial[i])) for i, lim in enumerate(self.limits)]
        self._snap_lag = [0.5 * lim.jerk * self.period_s**3 for lim in self.limits]
        self._fast_ok = [
            lim.deceleration - lim.acceleration <= lim.jerk * self.period_s for lim in self.limits
        ]
        self._max_steps = [
            int(
                4.0
                * (
                    lim.velocity / lim.deceleration
                    + 2.0 * max(lim.acceleration, lim.deceleration) / lim.jerk
                )
                / self.period_s
            )
            + 50
            for lim in self.limits
        ]
        self.p = [float(x) for x in initial]
        self.v = [0.0] * n
        self.a = [0.0] * n
        self._last_target: list[float | None] = [None] * n
        self.limited_joints = 0

    @property
    def positions(self) -> np.ndarray:
        """The last output."""
        return np.array(self.p)

    @property
    def velocities(self) -> np.ndarray:
        """Finite-difference velocity of the last output."""
        return np.array(self.v)

    @property
    def at_rest(self) -> bool:
        """True when every joint has (numerically) zero velocity and acceleration."""
        return all(abs(v) <= REST_VELOCITY for v in self.v) and all(
            abs(a) <= REST_ACCELERATION for a in self.a
        )

    def soft_bounds(self, index: int) -> tuple[float, float]:
        """The soft position band of joint ``index`` currently enforced."""
        return self._lo[index], self._hi[index]

    def _viable(self, i: int, p: float, v: float, a: float) -> bool:
        lim = self.limits[i]
        lo = self._lo[i]
        hi = self._hi[i]
        if abs(v) > lim.velocity or p < lo or p > hi:
            return False
        if self._fast_ok[i] and clearly_viable(p, v, a, lim, lo, hi, self.period_s):
            return True
        return brake_is_viable(p, v, a, lim, lo, hi, self.period_s, self._max_steps[i])

    def _advance(self, i: int, ak: float) -> None:
        """Apply ``ak``; the stored state is the finite difference of the outputs."""
        t = self.period_s
        p_old = self.p[i]
        v_old = self.v[i]
        v = v_old + ak * t
        if abs(v) <= REST_VELOCITY and abs(ak) <= REST_ACCELERATION:
            p = p_old
        else:
            p = min(max(p_old + v * t, self.hard_min[i]), self.hard_max[i])
        v_fd = (p - p_old) / t
        self.p[i] = p
        self.v[i] = v_fd
        self.a[i] = (v_fd - v_old) / t
        lim = self.limits[i]
        if self._lo[i] < lim.lo:
            self._lo[i] = min(lim.lo, max(self._lo[i], p))
        if self._hi[i] > lim.hi:
            self._hi[i] = max(lim.hi, min(self._hi[i], p))

    def _brake_joint(self, i: int) -> None:
        self._last_target[i] = None
        lim = self.limits[i]
        ak = brake_acceleration(self.v[i], self.a[i], lim, self.period_s)
        if ak is None:
            lo, hi = accel_interval(self.v[i], self.a[i], lim, self.period_s)
            ak = 0.5 * (lo + hi)
        self._advance(i, ak)

    def _track_joint(self, i: int, target: float) -> bool:
        """Advance joint ``i`` towards ``target``; True if the limits changed the command.

        Written with locals and inline clamps: it runs for every joint every tick.
        """
        lim = self.limits[i]
        t = self.period_s
        p = self.p[i]
        v = self.v[i]
        a = self.a[i]
        vmax = lim.velocity
        dec = lim.deceleration
        jerk = lim.jerk
        if target < lim.lo:
            target = lim.lo
        elif target > lim.hi:
            target = lim.hi
        previous = self._last_target[i]
        self._last_target[i] = target
        # Follow the target's own velocity and close the previous lag along a
        # braking-distance law, so a feasible stream passes through unchanged.
        v_ref = 0.0 if previous is None else (target - previous) / t
        if v_ref > vmax:
            v_ref = vmax
        elif v_ref < -vmax:
            v_ref = -vmax
        lag = (target - p) - v_ref * t
        abs_lag = -lag if lag < 0.0 else lag
        if abs_lag <= self._snap_lag[i]:
            correction = abs_lag / t  # small enough to close in one tick within the jerk limit
        else:
            correction = LAG_GAIN_PER_S * abs_lag
            braking_law = math.sqrt(dec * abs_lag)
            if braking_law < correction:
                correction = braking_law
        v_t = v_ref - correction if lag < 0.0 else v_ref + correction
        if v_t > vmax:
            v_t = vmax
        elif v_t < -vmax:
            v_t = -vmax
        dv = v_t - v
        a_cap = math.sqrt(2.0 * jerk * (-dv if dv < 0.0 else dv))
        a_t = dv / t
        if a_t > a_cap:
            a_t = a_cap
        elif a_t < -a_cap:
            a_t = -a_cap
        step = jerk * t
        lo = a - step
        hi = a + step
        acc = lim.acceleration
        if v > 0.0:
            lo = max(lo, -dec)
            hi = min(hi, acc)
        elif v < 0.0:
            lo = max(lo, -acc)
            hi = min(hi, dec)
        else:
            lo = max(lo, -acc)
            hi = min(hi, acc)
        if lo > hi:
            self._brake_joint(i)
            return True
        ak = lo if a_t < lo else (hi if a_t > hi else a_t)
        v_k = v + ak * t
        p_k = p + v_k * t
        if self._viable(i, p_k, v_k, ak):
            self._advance(i, ak)
            return p_k - target > 1e-12 or target - p_k > 1e-12
        safe = brake_acceleration(v, a, lim, t)
        if safe is None:
            self._brake_joint(i)
            return True
        unsafe = ak
        for _ in range(_BISECT_ITERATIONS):
            mid = 0.5 * (safe + unsafe)
            v_m = v + mid * t
            if self._viable(i, p + v_m * t, v_m, mid):
                safe = mid
            else:
                unsafe = mid
        self._advance(i, safe)
        return True

    def step(self, targets: np.ndarray) -> np.ndarray:
        """One tick towards finite ``targets`` (clamped to the soft bounds)."""
        changed = 0
        for i in range(len(self.p)):
            if self._track_joint(i, float(targets[i])):
                changed += 1
        self.limited_joints = changed
        return np.array(self.p)

    def brake(self) -> np.ndarray:
        """One tick of the brake policy on every joint (a controlled stop, then hold)."""
        for i in range(len(self.p)):
            self._brake_joint(i)
        self.limited_joints = 0
        return np.array(self.p)

    def freeze(self) -> np.ndarray:
        """Category 0: stop at the last output now (drives off); the state becomes rest."""
        n = len(self.p)
        self.v = [0.0] * n
        self.a = [0.0] * n
        self._last_target = [None] * n  # the next target's motion is not the old one's
        return np.array(self.p)
