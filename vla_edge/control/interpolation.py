"""Sampling a time-indexed trajectory: linear, cubic Hermite, and the splice bridge.

All functions return ``(position, velocity)`` so the controller always knows the
derivative of what it commands (needed for velocity-continuous splices and holds).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

InterpolationName = Literal["linear", "cubic"]


def finite_difference_tangents(times_s: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Tangents ``[N, A]`` for a cubic Hermite spline through the points.

    Interior points use the central difference over their two neighbours
    (Catmull-Rom for non-uniform spacing); the end points use the one-sided
    difference, so the spline's end velocity is that of its last segment.
    """
    n = times_s.shape[0]
    tangents = np.zeros_like(positions)
    if n < 2:
        return tangents
    tangents[0] = (positions[1] - positions[0]) / (times_s[1] - times_s[0])
    tangents[-1] = (positions[-1] - positions[-2]) / (times_s[-1] - times_s[-2])
    if n > 2:
        span_s = (times_s[2:] - times_s[:-2])[:, None]
        tangents[1:-1] = (positions[2:] - positions[:-2]) / span_s
    return tangents


def hermite(
    p0: np.ndarray,
    v0: np.ndarray,
    p1: np.ndarray,
    v1: np.ndarray,
    duration_s: float,
    tau_s: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Cubic Hermite segment from ``(p0, v0)`` to ``(p1, v1)`` over ``duration_s``.

    Args:
        tau_s: time since the start of the segment, clamped to ``[0, duration_s]``.
    """
    if duration_s <= 0.0:
        return p1.copy(), v1.copy()
    s = min(max(tau_s / duration_s, 0.0), 1.0)
    s2 = s * s
    s3 = s2 * s
    h00 = 2.0 * s3 - 3.0 * s2 + 1.0
    h10 = s3 - 2.0 * s2 + s
    h01 = -2.0 * s3 + 3.0 * s2
    h11 = s3 - s2
    position = h00 * p0 + (h10 * duration_s) * v0 + h01 * p1 + (h11 * duration_s) * v1
    d00 = (6.0 * s2 - 6.0 * s) / duration_s
    d10 = 3.0 * s2 - 4.0 * s + 1.0
    d01 = (-6.0 * s2 + 6.0 * s) / duration_s
    d11 = 3.0 * s2 - 2.0 * s
    velocity = d00 * p0 + d10 * v0 + d01 * p1 + d11 * v1
    return position, velocity


def segment_index(times_s: np.ndarray, t_s: float) -> int:
    """Index ``k`` of the segment ``[times_s[k], times_s[k+1]]`` that holds ``t_s``."""
    k = int(np.searchsorted(times_s, t_s, side="right")) - 1
    return min(max(k, 0), times_s.shape[0] - 2)


def sample_linear(
    times_s: np.ndarray, positions: np.ndarray, t_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """Piecewise-linear sample at ``t_s`` (clamped to the first/last point)."""
    n = times_s.shape[0]
    if n == 1 or t_s < times_s[0]:
        return positions[0].copy(), np.zeros(positions.shape[1])
    if t_s >= times_s[-1]:
        k = n - 2
        velocity = (positions[k + 1] - positions[k]) / (times_s[k + 1] - times_s[k])
        return positions[-1].copy(), velocity
    k = segment_index(times_s, t_s)
    dt_s = times_s[k + 1] - times_s[k]
    velocity = (positions[k + 1] - positions[k]) / dt_s
    return positions[k] + velocity * (t_s - times_s[k]), velocity


def sample_cubic(
    times_s: np.ndarray, positions: np.ndarray, tangents: np.ndarray, t_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """Cubic Hermite sample at ``t_s`` with precomputed ``tangents`` (clamped at the ends)."""
    n = times_s.shape[0]
    if n == 1 or t_s <= times_s[0]:
        return positions[0].copy(), (tangents[0].copy() if n > 1 else np.zeros(positions.shape[1]))
    if t_s >= times_s[-1]:
        return positions[-1].copy(), tangents[-1].copy()
    k = segment_index(times_s, t_s)
    return hermite(
        positions[k],
        tangents[k],
        positions[k + 1],
        tangents[k + 1],
        float(times_s[k + 1] - times_s[k]),
        float(t_s - times_s[k]),
    )


def hold_ramp(
    p0: np.ndarray, v0: np.ndarray, ramp_s: float, tau_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """Controlled hold: velocity falls linearly from ``v0`` to zero over ``ramp_s``.

    Position is continuous (no jump) and settles at ``p0 + v0 * ramp_s / 2``.
    """
    tau = min(max(tau_s, 0.0), ramp_s)
    position = p0 + v0 * (tau - tau * tau / (2.0 * ramp_s))
    velocity = v0 * (1.0 - tau / ramp_s)
    return position, velocity
