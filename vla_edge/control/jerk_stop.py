"""The shortest jerk-limited stop of one joint: velocity and acceleration to zero together.

From a continuous state (velocity ``v``, acceleration ``a``) the stop is at most
three constant-jerk phases under an acceleration bound ``A`` and a jerk bound ``J``:

1. the jerk drives the acceleration towards the braking bound ``-A`` (signs for a
   joint that ends moving forwards; mirrored otherwise), or back up to it when
   the start brakes harder than ``A``;
2. the acceleration holds at ``-A`` while the velocity falls;
3. the jerk ``+J`` releases the acceleration so that it reaches zero together
   with the velocity.

Phase 2 is empty when the velocity is too small to reach ``A`` (a triangular
acceleration profile). Which way the stop brakes is the sign of
``s = v + a |a| / (2 J)``, the velocity left when the acceleration is released
to zero at once: the switching curve ``s = 0`` of the time-optimal control of
``(v, a)`` to rest with bounded jerk. Every quantity has a closed form; the
stopping distance is the sum of the three phases' cubic travels.

The profile is continuous in acceleration with bounded jerk, so sampling it at
any period gives finite differences no larger than its continuous bounds (each
backward difference is a weighted average of the derivative over its window):
``|a| <= max(|a_0|, A)`` and ``|jerk| <= J``. The velocity peaks at its start or,
when the start accelerates forwards, where phase 1 crosses zero acceleration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class JerkStop:
    """One joint's stop: constant-jerk phases from ``(position, velocity, acceleration)``.

    Attributes:
        position: where the stop starts.
        velocity: the continuous velocity at the start.
        acceleration: the acceleration at the start.
        durations_s: the phases' durations (three, some may be 0).
        jerks: the phases' constant jerks.
    """

    position: float
    velocity: float
    acceleration: float
    durations_s: tuple[float, ...]
    jerks: tuple[float, ...]

    @property
    def duration_s(self) -> float:
        """Time from the start to rest."""
        return float(sum(self.durations_s))

    @cached_property
    def _rows(self) -> tuple[tuple[float, float, float, float], ...]:
        """Time, position, velocity and acceleration at each phase boundary (plain floats)."""
        rows = [(0.0, self.position, self.velocity, self.acceleration)]
        t, p, v, a = rows[0]
        for duration, jerk in zip(self.durations_s, self.jerks, strict=True):
            p = p + duration * (v + duration * (a / 2.0 + duration * jerk / 6.0))
            v = v + duration * (a + duration * jerk / 2.0)
            a = a + duration * jerk
            t = t + duration
            rows.append((t, p, v, a))
        return tuple(rows)

    @property
    def knots(self) -> np.ndarray:
        """``[phases + 1, 4]``: time, position, velocity and acceleration at each phase boundary."""
        return np.asarray(self._rows, dtype=np.float64)

    @property
    def end_position(self) -> float:
        """Where the joint comes to rest (closed form: the phases' travels summed)."""
        return self._rows[-1][1]

    @property
    def travel(self) -> float:
        """``end_position - position``: the signed stopping distance."""
        return self.end_position - self.position

    @property
    def peak_speed(self) -> float:
        """The largest ``|velocity|`` on the way to rest."""
        rows = self._rows
        peak = max(abs(row[2]) for row in rows)
        for (_, _, v, a), duration, jerk in zip(
            rows[:-1], self.durations_s, self.jerks, strict=True
        ):
            if jerk != 0.0 and 0.0 < -a / jerk < duration:  # the velocity turns inside the phase
                peak = max(peak, abs(v - a * a / (2.0 * jerk)))
        return peak

    def positions_at(self, times_s: np.ndarray) -> np.ndarray:
        """Positions at ``times_s`` (``>= 0``); after the stop the joint holds at rest."""
        knots = self.knots
        t = np.minimum(np.asarray(times_s, dtype=np.float64), knots[-1, 0])
        phase = np.clip(np.searchsorted(knots[1:, 0], t, side="right"), 0, len(self.jerks) - 1)
        _, p, v, a = knots[phase].T
        jerk = np.asarray(self.jerks, dtype=np.float64)[phase]
        dt = t - knots[phase, 0]
        out = p + dt * (v + dt * (a / 2.0 + dt * jerk / 6.0))
        out[t >= knots[-1, 0]] = knots[-1, 1]  # exactly the rest position
        return out


def jerk_limited_stop(
    position: float,
    velocity: float,
    acceleration: float,
    acceleration_limit: float,
    jerk_limit: float,
) -> JerkStop:
    """The shortest stop from ``(velocity, acceleration)`` with ``|a| <= A`` and ``|jerk| <= J``.

    A start accelerating harder than ``acceleration_limit`` first brings its
    acceleration back to the bound at the jerk bound (phase 1).

    Args:
        position: where the stop starts.
        velocity: the continuous velocity at the start.
        acceleration: the acceleration at the start.
        acceleration_limit: ``A > 0``, the braking bound.
        jerk_limit: ``J > 0``.
    """
    big_a, big_j = float(acceleration_limit), float(jerk_limit)
    v, a = float(velocity), float(acceleration)
    s = v + a * abs(a) / (2.0 * big_j)
    if s > 0.0:
        sign = 1.0
    elif s < 0.0:
        sign = -1.0
    else:  # on the switching curve (or at rest): release only
        sign = -1.0 if a > 0.0 else 1.0
    v, a = sign * v, sign * a  # now the joint ends moving forwards: brake with -A
    if a < -big_a:  # braking harder than the bound: back up to it, hold, release
        t1 = (-big_a - a) / big_j
        j1 = big_j
        t2 = max(v - a * a / (2.0 * big_j), 0.0) / big_a
        t3 = big_a / big_j
    else:
        # along jerk -J, v + a^2 / (2 J) is constant; the release curve is v = a^2 / (2 J)
        c = max(v + a * a / (2.0 * big_j), 0.0)
        j1 = -big_j
        if big_j * c <= big_a * big_a:  # no hold: the braking peaks below A
            peak = math.sqrt(big_j * c)
            t1 = max((a + peak) / big_j, 0.0)
            t2 = 0.0
            t3 = peak / big_j
        else:
            t1 = (a + big_a) / big_j
            t2 = (c - big_a * big_a / big_j) / big_a
            t3 = big_a / big_j
    return JerkStop(
        position=float(position),
        velocity=float(velocity),
        acceleration=float(acceleration),
        durations_s=(t1, t2, t3),
        jerks=(sign * j1, 0.0, sign * big_j),
    )
