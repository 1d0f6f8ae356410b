"""Arrival checks of an action chunk: shape, finiteness, time order and age.

Age is ``now_s - chunk.t_obs_s`` (the observation's stamp, never the publish
time). The age bound is inclusive: a chunk exactly ``max_chunk_age_s`` old is
accepted, anything older is rejected with :class:`StaleChunkError`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from vla_edge.core.errors import (
    EmptyChunkError,
    FutureChunkError,
    JointMismatchError,
    NonFiniteChunkError,
    NonMonotonicChunkError,
    OutOfLimitsChunkError,
    OutOfOrderChunkError,
    StaleChunkError,
)
from vla_edge.core.types import ActionChunk


def validate_chunk(
    chunk: ActionChunk,
    joint_names: Sequence[str],
    now_s: float,
    max_chunk_age_s: float,
    max_future_s: float,
    last_t_obs_s: float | None = None,
    position_min: np.ndarray | None = None,
    position_max: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Check ``chunk`` on arrival and return its absolute step times and positions.

    Checks run in this order: empty, joint names / dimension, non-finite,
    position limits (when given), non-monotonic step times, stamp in the
    future, age, order.

    Returns:
        ``(times_s [H], positions [H, A])`` as float64 copies.

    Raises:
        EmptyChunkError, JointMismatchError, NonFiniteChunkError,
        OutOfLimitsChunkError, NonMonotonicChunkError, FutureChunkError,
        StaleChunkError, OutOfOrderChunkError: each message names the field,
        value and bound.
    """
    positions = np.asarray(chunk.positions)
    if positions.ndim == 0 or positions.shape[0] == 0 or positions.size == 0:
        raise EmptyChunkError(f"positions has shape {positions.shape}: a chunk needs >= 1 step")
    expected = tuple(joint_names)
    if tuple(chunk.joint_names) != expected:
        raise JointMismatchError(
            f"joint_names = {list(chunk.joint_names)}, expected {list(expected)}"
        )
    if positions.ndim != 2 or positions.shape[1] != len(expected):
        raise JointMismatchError(
            f"positions has shape {positions.shape}, expected [H, {len(expected)}]"
        )
    positions = positions.astype(np.float64, copy=True)
    if not np.all(np.isfinite(positions)):
        bad = np.argwhere(~np.isfinite(positions))[0]
        raise NonFiniteChunkError(
            f"positions[{bad[0]}, {bad[1]}] = {positions[bad[0], bad[1]]}: must be finite"
        )
    if position_min is not None and position_max is not None:
        outside = (positions < position_min) | (positions > position_max)
        if np.any(outside):
            step, joint = (int(v) for v in np.argwhere(outside)[0])
            raise OutOfLimitsChunkError(
                f"positions[{step}, {joint}] ({expected[joint]}) = {positions[step, joint]:.6f} "
                f"outside [{position_min[joint]}, {position_max[joint]}] (bound: position limits)"
            )
    t_obs_s = float(chunk.t_obs_s)
    if not math.isfinite(t_obs_s):
        raise NonFiniteChunkError(f"t_obs_s = {t_obs_s}: must be finite")
    if chunk.time_from_start_s is None and not math.isfinite(float(chunk.dt_action_s)):
        raise NonFiniteChunkError(f"dt_action_s = {chunk.dt_action_s}: must be finite")
    offsets_s = np.asarray(chunk.offsets_s(), dtype=np.float64)
    if offsets_s.shape != (positions.shape[0],):
        raise JointMismatchError(
            f"time_from_start_s has shape {offsets_s.shape}, expected ({positions.shape[0]},)"
        )
    if not np.all(np.isfinite(offsets_s)):
        raise NonFiniteChunkError("time_from_start_s holds a non-finite value: must be finite")
    if offsets_s.shape[0] > 1:
        steps_s = np.diff(offsets_s)
        if not np.all(steps_s > 0.0):
            i = int(np.argmax(~(steps_s > 0.0)))
            raise NonMonotonicChunkError(
                f"step times: offset[{i + 1}] = {offsets_s[i + 1]} s is not after "
                f"offset[{i}] = {offsets_s[i]} s (bound: strictly increasing)"
            )
    age_s = now_s - t_obs_s
    if -age_s > max_future_s:
        raise FutureChunkError(
            f"t_obs_s = {t_obs_s} is {-age_s:.6f} s in the future of now_s = {now_s} "
            f"(bound: max_future_s = {max_future_s})"
        )
    if age_s > max_chunk_age_s:
        raise StaleChunkError(
            f"age = now_s - t_obs_s = {age_s:.6f} s exceeds max_chunk_age_s = {max_chunk_age_s}"
        )
    if last_t_obs_s is not None and t_obs_s < last_t_obs_s:
        raise OutOfOrderChunkError(
            f"t_obs_s = {t_obs_s} is older than the last accepted chunk's t_obs_s = "
            f"{last_t_obs_s} (bound: t_obs_s >= {last_t_obs_s})"
        )
    return t_obs_s + offsets_s, positions
