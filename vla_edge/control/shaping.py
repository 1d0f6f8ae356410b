"""Command shaping: the controller's output kept inside the safety node's limits, with a margin.

The safety node limits every command it passes (``safety/limiter.py``); this
module keeps the controller from needing it. :class:`CommandShaper` runs once
per control tick on the sampled plan (interpolation, bridge, merge or hold
ramp) and returns a command whose finite differences at the controller rate

* ``|v| <= margin * velocity``,
* ``|a| <= margin * min(acceleration, deceleration, 2 * jerk * T_safety)``,
* ``|a_k - a_{k-1}| <= margin * jerk * T``,

and that stays inside the safety node's soft position band. The acceleration
bound names ``2 * jerk * T_safety`` because the limiter passes a steadily
accelerating stream unchanged only below it: it caps the acceleration towards a
target velocity at ``sqrt(2 * jerk * |dv|)``, which for ``dv = a * T`` is ``a``
only while ``a <= 2 * jerk * T``.

A plan that already respects these bounds passes through unchanged (to the
last bit, so the arm executes what was planned); one that does not (a jump
between chunks, a gripper step, an acceleration step at a knot of the 10 Hz
plan) is followed along the limits and joined again without overshoot.

How: each tick the admissible acceleration is an interval — the jerk and
acceleration bounds, cut so that ramping the acceleration back to zero at the
jerk bound cannot carry the velocity past its bound
(``v + a T + a^2 / (2 J) <= V``, closed form). That interval is never empty
(ramping the acceleration towards zero is always in it), so the velocity,
acceleration and jerk bounds hold for any input stream: that is the guarantee.
It is then cut so that braking (at ``POSITION_BRAKE_SHARE`` of the acceleration
bound, with two ticks of slack) still stops inside the position band; that cut
never empties it (where nothing in it can, the shaper brakes as hard as the
bounds allow), and the band holds in practice (tested with the safety limiter
on random streams, not proven). Inside the interval, the acceleration chosen
lands on the plan where it can, else closes the lag along a braking-distance
law, as the safety limiter's tracking does.

``T`` is the controller's period; the safety node runs at the same rate here
(``rate_hz`` 100 in both configurations).

This is not the safety limiter: it runs in the controller, with the margin,
and never decides whether a command is safe; the safety node still limits
whatever reaches it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vla_edge.config.models import ControllerConfig, SafetyConfig
from vla_edge.core.errors import ConfigError

# Gain closing a lag behind the plan (1/s), below the braking-distance law; as
# the safety limiter's, slow against the jerk bound so the join does not ring.
LAG_GAIN_PER_S = 10.0
# Share of the acceleration bound used to brake before a position bound: the
# rest is left for the jerk-limited onset of the braking.
POSITION_BRAKE_SHARE = 0.8
# Bisection steps for the largest acceleration that can still brake before a bound.
_BISECT_ITERATIONS = 10


@dataclass(frozen=True)
class CommandLimits:
    """Per-joint bounds the controller's command keeps to (the safety limits times a margin).

    Attributes:
        velocity: ``[n]`` velocity bound.
        acceleration: ``[n]`` acceleration bound (both signs).
        jerk: ``[n]`` jerk bound.
        position_lo: ``[n]`` lower position bound (the safety node's soft band).
        position_hi: ``[n]`` upper position bound.
    """

    velocity: np.ndarray
    acceleration: np.ndarray
    jerk: np.ndarray
    position_lo: np.ndarray
    position_hi: np.ndarray

    @classmethod
    def from_safety(
        cls, safety: SafetyConfig, margin: float, joint_names: Sequence[str]
    ) -> CommandLimits:
        """``margin`` times the limits of ``safety``, for ``joint_names`` in order.

        Raises:
            ConfigError: the safety configuration lacks one of ``joint_names``,
                or ``margin`` is not in ``(0, 1]``.
        """
        if not 0.0 < margin <= 1.0:
            raise ConfigError(f"command_limit_margin = {margin}: expected 0 < margin <= 1")
        limits = safety.limit_arrays(joint_names)
        jerk = limits.jerk_limit_per_s3
        acceleration = np.minimum.reduce(
            [
                limits.acceleration_limit_per_s2,
                limits.deceleration_limit_per_s2,
                2.0 * jerk / safety.rate_hz,
            ]
        )
        return cls(
            velocity=margin * limits.velocity_limit_per_s,
            acceleration=margin * acceleration,
            jerk=margin * jerk,
            position_lo=limits.soft_min,
            position_hi=limits.soft_max,
        )


def command_limits_for(
    config: ControllerConfig, safety: SafetyConfig | None
) -> CommandLimits | None:
    """The bounds ``config`` shapes its command to, given the safety node's configuration.

    ``None`` (no shaping) when ``safety`` is ``None`` or ``command_limit_margin`` is 0.
    """
    if safety is None or config.command_limit_margin == 0.0:
        return None
    return CommandLimits.from_safety(safety, config.command_limit_margin, config.joint_names)


def load_safety_config(config: ControllerConfig) -> SafetyConfig:
    """The safety node's configuration from the file ``config.safety_params_file`` names.

    The package's ``config/safety.yaml`` when it names none: what the controller
    node starts with.

    Raises:
        ConfigError: the file is missing or invalid.
    """
    from vla_edge.config.loader import load_node_params
    from vla_edge.config.paths import config_path

    path = config.safety_params_file or config_path("safety.yaml")
    return load_node_params(path, "safety_node", SafetyConfig)


def load_command_limits(config: ControllerConfig) -> CommandLimits | None:
    """The bounds from the safety parameter file (:func:`load_safety_config`); ``None`` unshaped.

    Raises:
        ConfigError: the file is missing or invalid, or lacks a joint of the controller.
    """
    if config.command_limit_margin == 0.0:
        return None
    return command_limits_for(config, load_safety_config(config))


def _clip(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``np.clip`` as two ufuncs (a tenth of its call overhead on a few joints)."""
    return np.minimum(np.maximum(x, lo), hi)


def _velocity_room(room: np.ndarray, jerk: np.ndarray, period_s: float) -> np.ndarray:
    """Largest ``a >= 0`` with ``a T + a^2 / (2 J) <= room`` (``room`` clipped at 0).

    Ramping ``a`` back to zero at the jerk bound afterwards adds at most
    ``a^2 / (2 J)`` to the velocity, so the velocity then stays within ``room``.
    """
    room = np.maximum(room, 0.0)
    return jerk * (np.sqrt(period_s * period_s + 2.0 * room / jerk) - period_s)


def _stop_distance(
    speed: np.ndarray, acceleration: np.ndarray, decel: np.ndarray, jerk: np.ndarray
) -> np.ndarray:
    """Upper bound of the travel to rest from ``speed`` and ``acceleration`` (towards a bound).

    Continuous time: the acceleration first ramps to zero at ``jerk`` (``t1 = a / J``,
    the speed grows by ``a^2 / (2 J)``), then the brake reaches ``decel`` at ``jerk``;
    from zero acceleration a stop from ``v`` takes at most ``v^2 / (2 D) + v D / (2 J)``.
    """
    a_up = np.maximum(acceleration, 0.0)
    v1 = np.maximum(speed + a_up * a_up / (2.0 * jerk), 0.0)
    return v1 * v1 / (2.0 * decel) + v1 * decel / (2.0 * jerk) + v1 * a_up / jerk


def _largest_brakeable(
    p: np.ndarray,
    v: np.ndarray,
    a_lo: np.ndarray,
    a_hi: np.ndarray,
    bound: np.ndarray,
    amax: np.ndarray,
    jerk: np.ndarray,
    period_s: float,
) -> np.ndarray:
    """The largest acceleration in ``[a_lo, a_hi]`` after which braking stops below ``bound``.

    The brake is assumed at ``POSITION_BRAKE_SHARE * amax`` (the shaper may use all of
    ``amax``) with two ticks of travel added for the discrete time; ``a_lo`` where even
    that does not (brake as hard as the other bounds allow). For ``a <= 0`` the answer
    is closed form (a quadratic in the next velocity); above zero, a bisection of the
    same travel as :func:`_stop_distance` (joint by joint: rarely more than one).
    """
    t = period_s
    decel = POSITION_BRAKE_SHARE * amax

    def excess(acc: np.ndarray) -> np.ndarray:
        v_next = v + acc * t
        slack = 2.0 * t * np.maximum(v_next, 0.0)
        return p + v_next * t + _stop_distance(v_next, acc, decel, jerk) + slack - bound

    bad = excess(a_hi) > 0.0
    if not bad.any():
        return a_hi
    # a <= 0: p + vn T + vn^2 / (2 D) + vn D / (2 J) + 2 T vn <= bound for vn = v + a T >= 0
    room = bound - p
    b = 3.0 * t + decel / (2.0 * jerk)
    vn_max = np.where(
        room >= 0.0,
        decel * (np.sqrt(b * b + 2.0 * np.maximum(room, 0.0) / decel) - b),
        room / t,
    )
    best = (vn_max - v) / t
    for i in np.flatnonzero(bad & (best > 0.0)):  # in [0, min(best, a_hi)]: bisect it
        good, poor = 0.0, float(min(best[i], a_hi[i]))
        p_i, v_i, bound_i = float(p[i]), float(v[i]), float(bound[i])
        d_i, j_i = float(decel[i]), float(jerk[i])
        for _ in range(_BISECT_ITERATIONS):
            mid = 0.5 * (good + poor)
            v_next = v_i + mid * t
            v1 = max(v_next + mid * mid / (2.0 * j_i), 0.0)
            travel = v1 * v1 / (2.0 * d_i) + v1 * d_i / (2.0 * j_i) + v1 * mid / j_i
            if p_i + v_next * t + travel + 2.0 * t * max(v_next, 0.0) <= bound_i:
                good = mid
            else:
                poor = mid
        best[i] = good
    return np.where(bad, _clip(best, a_lo, a_hi), a_hi)


class CommandShaper:
    """Per-joint jerk-limited tracking of the sampled plan, one call per control tick.

    Args:
        limits: the bounds.
        period_s: the control period ``T`` (``1 / rate_hz``).
        initial_positions: where the command starts, at rest.
    """

    def __init__(
        self, limits: CommandLimits, period_s: float, initial_positions: np.ndarray
    ) -> None:
        if not period_s > 0.0:
            raise ConfigError(f"period_s = {period_s}: must be > 0")
        self.limits = limits
        self.period_s = float(period_s)
        p0 = np.asarray(initial_positions, dtype=np.float64)
        n = p0.shape[0]
        for name in ("velocity", "acceleration", "jerk", "position_lo", "position_hi"):
            if getattr(limits, name).shape != (n,):
                raise ConfigError(
                    f"command limits {name} has shape {getattr(limits, name).shape}, "
                    f"expected ({n},) for {n} joints"
                )
        # the soft band widens to include a start outside it, as the safety limiter's does
        self._lo = np.minimum(limits.position_lo, p0)
        self._hi = np.maximum(limits.position_hi, p0)
        self.p = p0.copy()
        self.v = np.zeros(n)
        self.a = np.zeros(n)
        self._reference = np.clip(p0, self._lo, self._hi)
        self._snap = 0.5 * limits.jerk * self.period_s**3
        self.shaped = False
        """Whether the last command differs from the plan."""

    @property
    def velocity(self) -> np.ndarray:
        """Finite-difference velocity of the last command."""
        return self.v.copy()

    def step(self, reference: np.ndarray) -> np.ndarray:
        """The command for this tick, given the plan's position ``reference``."""
        lim, t = self.limits, self.period_s
        p, v, a = self.p, self.v, self.a
        vmax, amax, jerk = lim.velocity, lim.acceleration, lim.jerk
        r = _clip(np.asarray(reference, dtype=np.float64), self._lo, self._hi)
        u = _clip((r - self._reference) / t, -vmax, vmax)  # the plan's own velocity
        self._reference = r

        # admissible accelerations: jerk and acceleration bounds ...
        a_lo = np.maximum(a - jerk * t, -amax)
        a_hi = np.minimum(a + jerk * t, amax)
        # ... velocity: stopping the acceleration at the jerk bound stays within it ...
        a_hi = np.minimum(a_hi, _velocity_room(vmax - v, jerk, t))
        a_lo = np.maximum(a_lo, -_velocity_room(vmax + v, jerk, t))
        # ... position: braking from the next state still stops inside the band (never
        # empties the interval: where even the lowest acceleration does not, it brakes)
        a_hi = _largest_brakeable(p, v, a_lo, a_hi, self._hi, amax, jerk, t)
        a_lo = -_largest_brakeable(-p, -v, -a_hi, -a_lo, -self._lo, amax, jerk, t)

        # inside them: land on the plan when the lag is within one tick's reach,
        # else close the lag along a braking-distance law (as the safety limiter's tracking)
        lag = r - p - u * t
        size = np.abs(lag)
        a_land = ((r - p) / t - v) / t
        land = (size <= self._snap) & (a_land >= a_lo) & (a_land <= a_hi)
        closing = np.minimum(LAG_GAIN_PER_S * size, np.sqrt(amax * size))
        v_target = _clip(u + np.sign(lag) * closing, -vmax, vmax)
        dv = v_target - v
        a_cap = np.sqrt(2.0 * jerk * np.abs(dv))
        a_k = _clip(_clip(dv / t, -a_cap, a_cap), a_lo, a_hi)

        p_new = np.where(land, r, p + (v + a_k * t) * t)
        v_new = (p_new - p) / t
        self.a = (v_new - v) / t
        self.v = v_new
        self.p = p_new
        # the band narrows back to the soft bounds as the command moves inside them
        self._lo = np.where(
            self._lo < lim.position_lo,
            np.minimum(lim.position_lo, np.maximum(self._lo, p_new)),
            self._lo,
        )
        self._hi = np.where(
            self._hi > lim.position_hi,
            np.maximum(lim.position_hi, np.minimum(self._hi, p_new)),
            self._hi,
        )
        self.shaped = not bool(land.all())
        return p_new.copy()
