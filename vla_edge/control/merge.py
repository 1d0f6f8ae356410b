"""How a new chunk is merged with what is buffered: one protocol, four strategies.

* ``replace``: the new chunk replaces the buffer at ``now``; a cubic Hermite
  bridge over ``bridge_duration_s`` joins the current commanded position and
  velocity to the new chunk, so the command stays velocity-continuous.
* ``weighted``: LeRobot's async aggregation: on overlapping target times the
  buffer becomes ``w_old * old + (1 - w_old) * new``; later steps are the new ones.
  Like ``ensemble`` below, the blended plan is joined from the commanded state
  with the same bridge as ``replace`` (``bridge_duration_s = 0`` blends
  without one, as LeRobot does).
* ``ensemble``: ACT temporal ensembling: every prediction made for a target
  time is averaged with weight ``exp(-decay * i)``, ``i = 0`` the oldest. The
  buffer keeps the exact sufficient statistics (weighted mean, weight sum and
  prediction count per target time), equivalent to keeping every prediction.
* ``prefix``: the head was conditioned on the steps executed during inference,
  so the new chunk replaces the buffer from ``now`` with only a short splice
  (``min(bridge_duration_s, dt_action_s)``) to absorb residual mismatch.

When nothing is buffered ahead of ``now`` (start-up or a hold) every strategy
splices the new chunk in like ``replace``.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from vla_edge.config.models import ControllerConfig
from vla_edge.control.chunk_buffer import Bridge, ChunkBuffer
from vla_edge.core.errors import ConfigError


class MergeStrategy(Protocol):
    """Merges a validated, past-trimmed chunk into the buffer in place."""

    name: str

    def merge(
        self,
        buffer: ChunkBuffer,
        times_s: np.ndarray,
        positions: np.ndarray,
        now_s: float,
        current_position: np.ndarray,
        current_velocity: np.ndarray,
    ) -> None:
        """Merge ``(times_s, positions)`` given the commanded state at ``now_s``."""
        ...


def splice(
    buffer: ChunkBuffer,
    times_s: np.ndarray,
    positions: np.ndarray,
    now_s: float,
    current_position: np.ndarray,
    current_velocity: np.ndarray,
    bridge_duration_s: float,
) -> None:
    """Replace the buffer by the chunk, bridged from the current state at ``now_s``."""
    buffer.set(times_s, positions)
    bridge_to_plan(
        buffer, now_s, current_position, current_velocity, bridge_duration_s, float(times_s[0])
    )


def bridge_to_plan(
    buffer: ChunkBuffer,
    now_s: float,
    current_position: np.ndarray,
    current_velocity: np.ndarray,
    bridge_duration_s: float,
    first_s: float,
) -> None:
    """Join the commanded state at ``now_s`` to the buffered plan with a cubic bridge.

    The bridge ends ``bridge_duration_s`` after ``now_s``, or at the plan's
    first point ``first_s`` if that is later. A plan that ends sooner is held
    at its last point until then (:meth:`ChunkBuffer.rest_until`): the bridge
    never takes less than ``bridge_duration_s``, however little of the plan is left.
    """
    end_s = max(now_s + bridge_duration_s, min(first_s, buffer.end_s))
    buffer.rest_until(end_s)
    duration_s = end_s - now_s
    if duration_s <= 0.0:
        return
    p1, v1 = buffer.sample_points(end_s)
    buffer.bridge = Bridge(
        now_s, duration_s, current_position.copy(), current_velocity.copy(), p1, v1
    )


class ReplaceMerge:
    """New chunk replaces the buffer, with a velocity-continuous bridge."""

    name = "replace"

    def __init__(self, bridge_duration_s: float) -> None:
        self.bridge_duration_s = bridge_duration_s

    def merge(
        self,
        buffer: ChunkBuffer,
        times_s: np.ndarray,
        positions: np.ndarray,
        now_s: float,
        current_position: np.ndarray,
        current_velocity: np.ndarray,
    ) -> None:
        """Splice the chunk in at ``now_s``."""
        splice(
            buffer,
            times_s,
            positions,
            now_s,
            current_position,
            current_velocity,
            self.bridge_duration_s,
        )


class PrefixMerge(ReplaceMerge):
    """Prefix-conditioned chunk: replace from ``now`` with a short splice."""

    name = "prefix"

    def __init__(self, bridge_duration_s: float, dt_action_s: float) -> None:
        super().__init__(min(bridge_duration_s, dt_action_s))


def _overlap(buffer: ChunkBuffer, times_s: np.ndarray) -> np.ndarray:
    """Mask of new step times that lie inside the buffered span."""
    return (times_s >= buffer.times_s[0]) & (times_s <= buffer.times_s[-1])


def _old_values(buffer: ChunkBuffer, times_s: np.ndarray) -> np.ndarray:
    """The buffered plan (bridge included, as executed) at ``times_s``."""
    out = np.empty((times_s.shape[0], buffer.n_joints))
    for i, t_s in enumerate(times_s):
        out[i], _ = buffer.sample(float(t_s))
    return out


def _splice_when_nothing_ahead(
    buffer: ChunkBuffer,
    times_s: np.ndarray,
    positions: np.ndarray,
    now_s: float,
    current_position: np.ndarray,
    current_velocity: np.ndarray,
    bridge_duration_s: float,
) -> bool:
    """Splice the chunk in (and say so) when no buffered point lies ahead to blend with."""
    if not buffer.is_empty and buffer.future_count(now_s) > 0:
        return False
    splice(buffer, times_s, positions, now_s, current_position, current_velocity, bridge_duration_s)
    return True


class _OverlapMerge:
    """Splices when nothing lies ahead in the buffer, else blends (``_blend``).

    A blend changes the plan under the current command, so it too is joined
    from the commanded state with a bridge of ``bridge_duration_s`` (0: none,
    as LeRobot and ACT execute it).
    """

    def __init__(self, bridge_duration_s: float) -> None:
        self.bridge_duration_s = bridge_duration_s

    def merge(
        self,
        buffer: ChunkBuffer,
        times_s: np.ndarray,
        positions: np.ndarray,
        now_s: float,
        current_position: np.ndarray,
        current_velocity: np.ndarray,
    ) -> None:
        """Merge a chunk into ``buffer`` (see :class:`MergeStrategy`)."""
        if _splice_when_nothing_ahead(
            buffer,
            times_s,
            positions,
            now_s,
            current_position,
            current_velocity,
            self.bridge_duration_s,
        ):
            return
        self._blend(buffer, times_s, positions)
        if self.bridge_duration_s > 0.0:
            bridge_to_plan(
                buffer, now_s, current_position, current_velocity, self.bridge_duration_s, now_s
            )

    def _blend(self, buffer: ChunkBuffer, times_s: np.ndarray, positions: np.ndarray) -> None:
        raise NotImplementedError


class WeightedMerge(_OverlapMerge):
    """LeRobot-style blend: ``w_old * old + (1 - w_old) * new`` on overlapping steps."""

    name = "weighted"

    def __init__(self, old_weight: float, bridge_duration_s: float) -> None:
        super().__init__(bridge_duration_s)
        self.old_weight = old_weight

    def _blend(self, buffer: ChunkBuffer, times_s: np.ndarray, positions: np.ndarray) -> None:
        """Blend overlapping steps; keep older buffered points before the chunk."""
        overlap = _overlap(buffer, times_s)
        merged = positions.copy()
        if np.any(overlap):
            old = _old_values(buffer, times_s[overlap])
            merged[overlap] = self.old_weight * old + (1.0 - self.old_weight) * positions[overlap]
        keep = buffer.times_s < times_s[0]
        buffer.set(
            np.concatenate([buffer.times_s[keep], times_s]),
            np.concatenate([buffer.positions[keep], merged]),
        )


class EnsembleMerge(_OverlapMerge):
    """ACT temporal ensembling with weights ``exp(-decay * i)`` (``i = 0`` oldest)."""

    name = "ensemble"

    def __init__(self, decay: float, bridge_duration_s: float) -> None:
        super().__init__(bridge_duration_s)
        self.decay = decay

    def _blend(self, buffer: ChunkBuffer, times_s: np.ndarray, positions: np.ndarray) -> None:
        """Fold the new predictions into the per-target-time weighted means."""
        n = times_s.shape[0]
        overlap = _overlap(buffer, times_s)
        means = positions.copy()
        weights = np.ones(n)
        counts = np.ones(n, dtype=np.int64)
        if np.any(overlap):
            t_overlap = times_s[overlap]
            old_mean = _old_values(buffer, t_overlap)
            old_weight = np.interp(t_overlap, buffer.times_s, buffer.weights)
            old_count = np.rint(np.interp(t_overlap, buffer.times_s, buffer.counts)).astype(
                np.int64
            )
            new_weight = np.exp(-self.decay * old_count.astype(np.float64))
            total = old_weight + new_weight
            means[overlap] = (
                old_weight[:, None] * old_mean + new_weight[:, None] * positions[overlap]
            ) / total[:, None]
            weights[overlap] = total
            counts[overlap] = old_count + 1
        keep = buffer.times_s < times_s[0]
        buffer.set(
            np.concatenate([buffer.times_s[keep], times_s]),
            np.concatenate([buffer.positions[keep], means]),
            weights=np.concatenate([buffer.weights[keep], weights]),
            counts=np.concatenate([buffer.counts[keep], counts]),
        )


def make_merge_strategy(config: ControllerConfig) -> MergeStrategy:
    """The strategy named by ``config.merge``, parametrised from the config."""
    if config.merge == "replace":
        return ReplaceMerge(config.bridge_duration_s)
    if config.merge == "prefix":
        return PrefixMerge(config.bridge_duration_s, config.dt_action_s)
    if config.merge == "weighted":
        return WeightedMerge(config.weighted_old_weight, config.bridge_duration_s)
    if config.merge == "ensemble":
        return EnsembleMerge(config.ensemble_decay, config.bridge_duration_s)
    raise ConfigError(f"merge = {config.merge!r}: expected one of replace/weighted/ensemble/prefix")
