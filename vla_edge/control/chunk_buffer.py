"""A time-indexed buffer of joint targets, sampled at the controller rate.

Points are absolute times (the controller's clock) with one position row each,
plus the ensemble statistics (weight sum and prediction count per target time)
and an optional velocity-continuous :class:`Bridge` that overrides the first
part of the buffer after a splice.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vla_edge.control.interpolation import (
    InterpolationName,
    finite_difference_tangents,
    hermite,
    sample_cubic,
    sample_linear,
)
from vla_edge.core.errors import StaleChunkError


@dataclass
class Bridge:
    """Cubic Hermite from ``(p0, v0)`` at ``start_s`` to ``(p1, v1)`` ``duration_s`` later."""

    start_s: float
    duration_s: float
    p0: np.ndarray
    v0: np.ndarray
    p1: np.ndarray
    v1: np.ndarray

    @property
    def end_s(self) -> float:
        """Time the bridge hands over to the buffer."""
        return self.start_s + self.duration_s


def drop_past_steps(
    times_s: np.ndarray, positions: np.ndarray, now_s: float
) -> tuple[np.ndarray, np.ndarray, int]:
    """Drop steps already in the past, keeping the last one at or before ``now_s``.

    Returns:
        ``(times_s, positions, n_dropped)``.

    Raises:
        StaleChunkError: every step lies at or before ``now_s`` (nothing to execute).
    """
    if times_s[-1] <= now_s:
        raise StaleChunkError(
            f"last step time = {times_s[-1]} s is not after now_s = {now_s} "
            f"(bound: at least one step after now)"
        )
    first = int(np.searchsorted(times_s, now_s, side="right")) - 1
    first = max(first, 0)
    return times_s[first:], positions[first:], first


class ChunkBuffer:
    """Buffered future targets with their interpolation and splice bridge."""

    def __init__(self, n_joints: int, interpolation: InterpolationName) -> None:
        self.n_joints = n_joints
        self.interpolation: InterpolationName = interpolation
        self.times_s = np.zeros(0)
        self.positions = np.zeros((0, n_joints))
        self.weights = np.zeros(0)
        self.counts = np.zeros(0, dtype=np.int64)
        self.tangents = np.zeros((0, n_joints))
        self.bridge: Bridge | None = None

    @property
    def is_empty(self) -> bool:
        """True when no point is buffered."""
        return self.times_s.shape[0] == 0

    @property
    def end_s(self) -> float:
        """Time of the last buffered point (``-inf`` when empty)."""
        return float(self.times_s[-1]) if self.times_s.shape[0] else float("-inf")

    def set(
        self,
        times_s: np.ndarray,
        positions: np.ndarray,
        weights: np.ndarray | None = None,
        counts: np.ndarray | None = None,
        bridge: Bridge | None = None,
    ) -> None:
        """Replace the content (weights and counts default to one prediction each)."""
        n = times_s.shape[0]
        self.times_s = np.ascontiguousarray(times_s, dtype=np.float64)
        self.positions = np.ascontiguousarray(positions, dtype=np.float64)
        self.weights = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
        self.counts = (
            np.ones(n, dtype=np.int64) if counts is None else np.asarray(counts, dtype=np.int64)
        )
        self.tangents = finite_difference_tangents(self.times_s, self.positions)
        self.bridge = bridge

    def clear(self) -> None:
        """Forget every point and the bridge."""
        self.set(np.zeros(0), np.zeros((0, self.n_joints)))

    def rest_until(self, t_s: float) -> None:
        """Hold the last point until ``t_s`` (a copy appended there) if the plan ends sooner."""
        n = self.times_s.shape[0]
        if n == 0 or t_s <= self.times_s[-1]:
            return
        self.set(
            np.append(self.times_s, t_s),
            np.vstack([self.positions, self.positions[-1:]]),
            weights=np.append(self.weights, self.weights[-1]),
            counts=np.append(self.counts, self.counts[-1]),
            bridge=self.bridge,
        )

    def drop_past(self, now_s: float) -> int:
        """Drop points before the last one at or before ``now_s`` (keep >= 2); return the count."""
        n = self.times_s.shape[0]
        if n < 2 or self.times_s[1] > now_s:
            if self.bridge is not None and self.bridge.end_s < now_s:
                self.bridge = None
            return 0
        first = int(np.searchsorted(self.times_s, now_s, side="right")) - 1
        first = min(first, n - 2)  # the last segment stays: it carries the end velocity
        if first <= 0:
            return 0
        self.times_s = self.times_s[first:]
        self.positions = self.positions[first:]
        self.weights = self.weights[first:]
        self.counts = self.counts[first:]
        self.tangents = self.tangents[first:]
        if self.bridge is not None and self.bridge.end_s < now_s:
            self.bridge = None
        return first

    def future_count(self, now_s: float) -> int:
        """Number of buffered points strictly after ``now_s``."""
        n = self.times_s.shape[0]
        return n - int(np.searchsorted(self.times_s, now_s, side="right"))

    def sample_points(self, t_s: float) -> tuple[np.ndarray, np.ndarray]:
        """Position and velocity of the buffered points at ``t_s``, ignoring the bridge."""
        if self.times_s.shape[0] == 0:
            raise IndexError("sample of an empty chunk buffer")
        if self.interpolation == "linear":
            return sample_linear(self.times_s, self.positions, t_s)
        return sample_cubic(self.times_s, self.positions, self.tangents, t_s)

    def sample(self, t_s: float) -> tuple[np.ndarray, np.ndarray]:
        """Position and velocity at ``t_s`` (the bridge first, then the points)."""
        bridge = self.bridge
        if bridge is not None and bridge.start_s <= t_s <= bridge.end_s:
            return hermite(
                bridge.p0, bridge.v0, bridge.p1, bridge.v1, bridge.duration_s, t_s - bridge.start_s
            )
        return self.sample_points(t_s)
