"""``SafetySupervisor``: the single entry point of the safety node and the evaluator.

One call of :meth:`SafetySupervisor.filter` or :meth:`SafetySupervisor.hold`
per tick of ``1 / rate_hz``. Whatever comes in, the returned position command
is finite, inside the soft position bounds, and obeys the velocity,
acceleration/deceleration and jerk limits relative to the previous outputs.
Outside normal operation the output follows the limiter's brake policy (a
controlled stop, then hold); with ``estop_category: cat0`` an e-stop freezes
the output at once.
"""

from __future__ import annotations

import numpy as np

from vla_edge.config.models import SafetyConfig
from vla_edge.core.errors import InvalidCommandError
from vla_edge.core.stop import StopCategory
from vla_edge.core.types import JointCommand
from vla_edge.safety.limiter import Limiter
from vla_edge.safety.state_machine import SafetyStateMachine
from vla_edge.safety.status import level_for
from vla_edge.safety.validation import validate_command

_REASONS = ("joint_mismatch", "non_finite", "out_of_limits", "stale")


class SafetySupervisor:
    """Validation + stop-category state machine + e-stop latch + limiter."""

    def __init__(self, config: SafetyConfig, initial_positions: np.ndarray) -> None:
        self.config = config
        self.joint_names = tuple(config.joint_names)
        self.limiter = Limiter(config, initial_positions)
        self.machine = SafetyStateMachine(config)
        arrays = config.limit_arrays()
        self._position_min = [float(x) for x in arrays.position_min]
        self._position_max = [float(x) for x in arrays.position_max]
        self._target: np.ndarray | None = None
        self._last_message = "waiting for the first command"
        self.counters: dict[str, int] = {
            "ticks": 0,
            "accepted": 0,
            "rejected": 0,
            **{f"rejected_{reason}": 0 for reason in _REASONS},
            "ignored_while_stopped": 0,
            "limited_ticks": 0,
            "brake_ticks": 0,
            "estops": 0,
            "resets": 0,
            "tracking_errors": 0,
        }

    # --- per tick ---------------------------------------------------------------------

    @property
    def state(self) -> StopCategory:
        """The current stop category."""
        return self.machine.state

    def filter(self, command: JointCommand, now_s: float) -> np.ndarray:
        """The safe position command for this tick given ``command``."""
        self.counters["ticks"] += 1
        self.machine.update(now_s)
        try:
            target = validate_command(
                command,
                self.joint_names,
                self._position_min,
                self._position_max,
                now_s,
                self.config.command_timeout_s,
            )
        except InvalidCommandError as exc:
            reason = getattr(exc, "reason", "invalid")
            self.counters["rejected"] += 1
            key = f"rejected_{reason}"
            self.counters[key] = self.counters.get(key, 0) + 1
            self._last_message = f"rejected command: {exc}"
            self.machine.on_invalid_command(reason, now_s)
            return self._stop_output()
        if not self.machine.on_valid_command(float(command.stamp_s), now_s):
            self.counters["ignored_while_stopped"] += 1
            return self._stop_output()
        self.counters["accepted"] += 1
        self._target = target
        return self._track(target)

    def hold(self, now_s: float) -> np.ndarray:
        """Output for a tick without a new command.

        Within ``command_timeout_s`` of the last command the last target is kept
        (a missed tick does not brake); after that the command silence is a
        category-1 stop.
        """
        self.counters["ticks"] += 1
        if self.machine.update(now_s) != StopCategory.NONE or self._target is None:
            return self._stop_output()
        return self._track(self._target)

    def _track(self, target: np.ndarray) -> np.ndarray:
        out = self.limiter.step(target)
        if self.limiter.limited_joints:
            self.counters["limited_ticks"] += 1
        return out

    def _stop_output(self) -> np.ndarray:
        self._target = None
        if self.machine.estop.latched and self.machine.estop_category == StopCategory.CAT0:
            return self.limiter.freeze()
        self.counters["brake_ticks"] += 1
        return self.limiter.brake()

    # --- events -------------------------------------------------------------------------

    def on_joint_state(self, positions: np.ndarray, now_s: float) -> None:
        """Measured joint positions: feeds the joint-state watchdog and the tracking check."""
        measured = np.asarray(positions, dtype=np.float64)
        tracking_ok = bool(
            measured.shape == (len(self.joint_names),)
            and np.all(np.isfinite(measured))
            and np.max(np.abs(measured - self.limiter.positions)) <= self.config.max_tracking_error
        )
        if not tracking_ok:
            self.counters["tracking_errors"] += 1
        self.machine.on_joint_state(now_s, tracking_ok)

    def estop(self, now_s: float) -> None:
        """Latch the e-stop (category from ``estop_category``)."""
        self.counters["estops"] += 1
        self.machine.trigger_estop(now_s)
        self._target = None
        if self.machine.estop_category == StopCategory.CAT0:
            self.limiter.freeze()

    def reset(self, now_s: float) -> bool:
        """Clear the e-stop latch; True if it was latched. Never resumes motion by itself."""
        cleared = self.machine.reset_estop(now_s)
        if cleared:
            self.counters["resets"] += 1
        return cleared

    # --- diagnostics --------------------------------------------------------------------

    def status(self) -> dict[str, object]:
        """Level (OK/WARN/ERROR), message and key/values for ``/diagnostics``."""
        state = self.machine.state
        level = level_for(state)
        reasons = self.machine.reasons()
        message = "ok" if state == StopCategory.NONE else f"{state.value}: {', '.join(reasons)}"
        values: dict[str, float | int | str] = {
            "state": state.value,
            "reasons": ",".join(reasons),
            "estop_latched": int(self.machine.estop.latched),
            "at_rest": int(self.limiter.at_rest),
            "limited_joints": self.limiter.limited_joints,
            "last_event": self._last_message,
            "clock_jumps": self.machine.clock_jumps,
            **self.counters,
        }
        return {"level": level, "level_name": level.name, "message": message, "values": values}
