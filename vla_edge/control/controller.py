"""The controller step: validate and merge chunks, sample the buffer, hold when empty.

Time semantics: step ``i`` of a chunk is the target for
``t_obs_s + time_from_start[i]``; ``now_s`` is the same clock. One
:meth:`Controller.step` per control tick samples the buffer at ``now_s``; when
the buffer runs out the command follows a controlled hold whose velocity ramps
linearly to zero over ``hold_ramp_s`` (position and velocity stay continuous).
"""

from __future__ import annotations

import math

import numpy as np

from vla_edge.config.models import ControllerConfig
from vla_edge.control.chunk_buffer import ChunkBuffer, drop_past_steps
from vla_edge.control.interpolation import hold_ramp
from vla_edge.control.merge import MergeStrategy, make_merge_strategy
from vla_edge.control.shaping import CommandLimits, CommandShaper
from vla_edge.control.staleness import validate_chunk
from vla_edge.core.errors import (
    ChunkRejectedError,
    EmptyChunkError,
    FutureChunkError,
    InvalidCommandError,
    JointMismatchError,
    NonFiniteChunkError,
    NonFiniteClockError,
    NonMonotonicChunkError,
    OutOfLimitsChunkError,
    OutOfOrderChunkError,
    StaleChunkError,
)
from vla_edge.core.types import ActionChunk, JointCommand

# Slack in grid steps (not seconds) when counting the buffered steps left: a buffer
# that ends on the grid, up to rounding, keeps its last step.
STEP_COUNT_SLACK = 1e-9

_REJECTION_REASONS = tuple(
    cls.reason
    for cls in (
        EmptyChunkError,
        NonFiniteChunkError,
        NonMonotonicChunkError,
        JointMismatchError,
        StaleChunkError,
        FutureChunkError,
        OutOfOrderChunkError,
        OutOfLimitsChunkError,
        NonFiniteClockError,
    )
)


class Controller:
    """Chunk buffer + merge strategy + sampling at the controller rate (+ command shaping).

    Args:
        config: the controller's parameters.
        initial_positions: where the command starts, at rest.
        merge: the merge strategy (default: the one ``config.merge`` names).
        limits: the bounds the command keeps to
            (:func:`~vla_edge.control.shaping.command_limits_for` the safety
            configuration); ``None``: the sampled plan is commanded as it is.
    """

    def __init__(
        self,
        config: ControllerConfig,
        initial_positions: np.ndarray,
        merge: MergeStrategy | None = None,
        limits: CommandLimits | None = None,
    ) -> None:
        self.config = config
        self.joint_names = tuple(config.joint_names)
        n = len(self.joint_names)
        initial = np.asarray(initial_positions, dtype=np.float64)
        if initial.shape != (n,):
            raise InvalidCommandError(
                f"initial_positions has shape {initial.shape}, expected ({n},) for {n} joints"
            )
        if not np.all(np.isfinite(initial)):
            raise InvalidCommandError(f"initial_positions = {initial.tolist()}: must be finite")
        self.merge: MergeStrategy = merge if merge is not None else make_merge_strategy(config)
        self.shaper = (
            CommandShaper(limits, 1.0 / config.rate_hz, initial) if limits is not None else None
        )
        self.buffer = ChunkBuffer(n, config.interpolation)
        self._hold_start_s = float("-inf")
        self._hold_p0 = initial.copy()
        self._hold_v0 = np.zeros(n)
        self._last_t_obs_s: float | None = None
        self._last_command = initial.copy()
        self._last_chunk_age_s = float("nan")
        self._tracking_error = 0.0
        self._position_min = (
            np.asarray(config.position_min, dtype=np.float64) if config.position_min else None
        )
        self._position_max = (
            np.asarray(config.position_max, dtype=np.float64) if config.position_max else None
        )
        self._last_step_s: float | None = None
        self._last_velocity = np.zeros(n)
        self.clock_jumped = False
        self.counters: dict[str, int] = {
            "accepted": 0,
            "rejected": 0,
            **{f"rejected_{reason}": 0 for reason in _REJECTION_REASONS},
            "dropped_past_steps": 0,
            "steps": 0,
            "hold_entries": 0,
            "clock_jumps": 0,
            "stops": 0,
            "limit_clamps": 0,
            "shaped_steps": 0,
            "non_finite_clock_steps": 0,
        }

    # --- chunks ---------------------------------------------------------------------------

    def submit(self, chunk: ActionChunk, now_s: float) -> None:
        """Validate ``chunk``, drop its past steps and merge it into the buffer.

        Raises:
            ChunkRejectedError: a subclass naming the rule; counted in
                ``counters["rejected_<reason>"]``.
        """
        try:
            if not math.isfinite(now_s):
                raise NonFiniteClockError(f"now_s = {now_s}: the controller's clock must be finite")
            times_s, positions = validate_chunk(
                chunk,
                self.joint_names,
                now_s,
                self.config.max_chunk_age_s,
                self.config.max_future_s,
                self._last_t_obs_s,
                self._position_min,
                self._position_max,
            )
            times_s, positions, n_dropped = drop_past_steps(times_s, positions, now_s)
        except ChunkRejectedError as exc:
            self.counters["rejected"] += 1
            key = f"rejected_{exc.reason}"
            self.counters[key] = self.counters.get(key, 0) + 1
            raise
        position, velocity = self._planned_state(now_s)
        self.merge.merge(self.buffer, times_s, positions, now_s, position, velocity)
        self._hold_start_s = float("-inf")
        self._last_t_obs_s = float(chunk.t_obs_s)
        self._last_chunk_age_s = now_s - float(chunk.t_obs_s)
        self.counters["accepted"] += 1
        self.counters["dropped_past_steps"] += n_dropped

    # --- sampling -------------------------------------------------------------------------

    def _planned_state(self, t_s: float) -> tuple[np.ndarray, np.ndarray]:
        """Commanded position and velocity at ``t_s`` (buffer, bridge or hold)."""
        buffer = self.buffer
        if not buffer.is_empty and t_s <= buffer.end_s:
            return buffer.sample(t_s)
        if not buffer.is_empty and self._hold_start_s == float("-inf"):
            end_s = buffer.end_s
            self._hold_p0, self._hold_v0 = buffer.sample(end_s)
            self._hold_start_s = end_s
            self.counters["hold_entries"] += 1
        if self._hold_start_s == float("-inf"):
            return self._hold_p0.copy(), np.zeros_like(self._hold_p0)
        return hold_ramp(
            self._hold_p0, self._hold_v0, self.config.hold_ramp_s, t_s - self._hold_start_s
        )

    def is_clock_jump(self, now_s: float) -> bool:
        """Whether a tick at ``now_s`` is a clock jump from the last tick (a query only)."""
        last_s = self._last_step_s
        if last_s is None:
            return False
        return not 0.0 <= now_s - last_s <= self.config.clock_jump_threshold_s

    def _detect_clock_jump(self, now_s: float) -> bool:
        """A step of the clock backwards, or forwards by more than ``clock_jump_threshold_s``.

        The buffer is indexed by time, so after a jump it means nothing: drop it
        and hold at the last command (category-2 hold until a fresh chunk on the
        new clock; the order check restarts too).
        """
        jumped = self.is_clock_jump(now_s)
        self._last_step_s = now_s
        if not jumped:
            return False
        self.counters["clock_jumps"] += 1
        self.buffer.clear()
        # ramp the last commanded velocity to zero from here: no position or velocity jump
        self._hold_p0 = self._last_command.copy()
        self._hold_v0 = self._last_velocity.copy()
        self._hold_start_s = now_s
        self.counters["hold_entries"] += 1
        self._last_t_obs_s = None
        return True

    def stop(self, now_s: float) -> None:
        """Controlled stop (category 1): drop the plan, ramp the velocity to zero from here.

        Fresh chunks resume motion; the caller decides when to accept them.
        """
        if self.buffer.is_empty and self._hold_start_s != float("-inf"):
            return  # already holding
        position, velocity = self._planned_state(now_s)
        self.buffer.clear()
        self._hold_p0 = np.asarray(position, dtype=np.float64).copy()
        self._hold_v0 = np.asarray(velocity, dtype=np.float64).copy()
        self._hold_start_s = now_s
        self.counters["stops"] += 1
        self.counters["hold_entries"] += 1

    def step(self, now_s: float, measured_positions: np.ndarray | None = None) -> JointCommand:
        """The joint command for the tick at ``now_s``.

        With ``position_min``/``position_max`` configured the command is kept
        inside them (a hold ramp or cubic interpolation near a limit may
        overshoot the last target by a little). With command limits the sampled
        plan is then shaped into them (counted in ``shaped_steps`` when the
        command differs from the plan).

        A non-finite ``now_s`` changes nothing: the last command comes back with
        the last finite stamp (counted in ``non_finite_clock_steps``).
        """
        if not math.isfinite(now_s):
            self.clock_jumped = False
            self.counters["non_finite_clock_steps"] += 1
            last_s = self._last_step_s if self._last_step_s is not None else 0.0
            return JointCommand(last_s, self.joint_names, self._last_command.copy())
        self.clock_jumped = self._detect_clock_jump(now_s)
        self.buffer.drop_past(now_s)
        position, velocity = self._planned_state(now_s)
        if self._position_min is not None and self._position_max is not None:
            clamped = np.clip(position, self._position_min, self._position_max)
            if np.any(clamped != position):
                self.counters["limit_clamps"] += 1
                velocity = np.where(clamped != position, 0.0, velocity)
                position = clamped
        if self.shaper is not None:
            position = self.shaper.step(position)
            velocity = self.shaper.velocity
            if self.shaper.shaped:
                self.counters["shaped_steps"] += 1
        self._last_velocity = np.asarray(velocity, dtype=np.float64)
        if not self.buffer.is_empty and now_s > self.buffer.end_s:
            self.buffer.clear()
        self.counters["steps"] += 1
        self._last_command = position
        if measured_positions is not None:
            self._tracking_error = float(
                np.max(np.abs(position - np.asarray(measured_positions, dtype=np.float64)))
            )
        return JointCommand(now_s, self.joint_names, position)

    # --- queries --------------------------------------------------------------------------

    @property
    def holding(self) -> bool:
        """True when the buffer has run out and the command is (ramping into) a hold."""
        return self.buffer.is_empty

    def buffered_steps(self, now_s: float) -> int:
        """Buffered chunk steps strictly after ``now_s``."""
        return 0 if self.buffer.is_empty else self.buffer.future_count(now_s)

    def needs_inference(self, now_s: float) -> bool:
        """Whether a new chunk should be requested now.

        ``continuous``: always. ``threshold``: when the buffered steps are at most
        ``threshold_fraction * chunk_horizon`` (LeRobot's ``chunk_size_threshold``).
        """
        if self.config.infer_trigger == "continuous":
            return True
        fraction = self.buffered_steps(now_s) / self.config.chunk_horizon
        return fraction <= self.config.threshold_fraction

    def remaining_plan(self, now_s: float) -> ActionChunk | None:
        """Buffered future steps on the ``dt_action_s`` grid, stamped at ``now_s``.

        Step ``i`` is the commanded position at ``now_s + i * dt_action_s``
        (bridge included), for ``i`` up to the end of the buffer. ``None`` while
        holding.
        """
        if self.buffer.is_empty or self.buffer.end_s <= now_s:
            return None
        dt_s = self.config.dt_action_s
        n = int(np.floor((self.buffer.end_s - now_s) / dt_s + STEP_COUNT_SLACK)) + 1
        positions = np.empty((n, len(self.joint_names)))
        for i in range(n):
            positions[i], _ = self.buffer.sample(now_s + i * dt_s)
        return ActionChunk(now_s, dt_s, self.joint_names, positions)

    def prefix_plan(self, now_s: float) -> ActionChunk | None:
        """The remaining plan a new chunk is conditioned on: only with the ``prefix`` merge.

        Other merges blend or splice the new chunk themselves and ask for an
        unconditioned one (``None``); ``None`` as well while holding.
        """
        return self.remaining_plan(now_s) if self.config.merge == "prefix" else None

    def diagnostics(self, now_s: float) -> dict[str, float | int | str]:
        """Key/values for ``/diagnostics``."""
        return {
            "merge": self.merge.name,
            "interpolation": self.config.interpolation,
            "holding": int(self.holding),
            "buffered_steps": self.buffered_steps(now_s),
            "last_chunk_age_s": self._last_chunk_age_s,
            "tracking_error": self._tracking_error,
            **self.counters,
        }
