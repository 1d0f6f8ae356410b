"""The stop-category state machine of the safety layer.

Conditions, their category, and what clears them:

* no command yet, stale command -> CAT2; cleared by a fresh valid command.
* joint-state loss (armed by the first joint state) -> CAT1; cleared when joint
  states are back *and* a valid command stamped after the loss arrives.
* command silence longer than ``command_timeout_s`` (armed by the first
  command) -> CAT1; cleared by a valid command stamped after the detection.
* ``violation_persist_count`` invalid commands in a row -> CAT1; cleared by a
  valid command stamped after the last violation.
* tracking error above ``max_tracking_error`` as many times in a row -> CAT1;
  cleared when tracking is back *and* a valid command stamped after arrives.
* e-stop -> ``estop_category`` (CAT1 or CAT0), latched; cleared by ``reset``
  *and then* a command stamped after the reset.
* the clock stepping backwards by more than the shorter timeout (a sim-time
  reset, an NTP step) -> CAT2, as the controller's own clock-jump hold; every
  stored time is moved back to the new ``now``, so the timeouts run again on
  the new clock; cleared by a fresh valid command.
"""

from __future__ import annotations

from vla_edge.config.models import SafetyConfig
from vla_edge.core.stop import StopCategory
from vla_edge.safety.estop import EStopLatch


class SafetyStateMachine:
    """Tracks conditions and gives the current :class:`StopCategory`."""

    def __init__(self, config: SafetyConfig) -> None:
        self.config = config
        self.estop = EStopLatch()
        self.estop_category = (
            StopCategory.CAT0 if config.estop_category == "cat0" else StopCategory.CAT1
        )
        self.cat2_reason: str | None = "no_command"
        self.cat1_reasons: dict[str, float] = {}
        self.awaiting_after_reset_s: float | None = None
        self.consecutive_violations = 0
        self.consecutive_tracking_errors = 0
        self.last_command_s: float | None = None
        self.last_joint_state_s: float | None = None
        self.clock_jumps = 0
        self._state = StopCategory.CAT2
        self.entries: dict[StopCategory, int] = {c: 0 for c in StopCategory}

    @property
    def state(self) -> StopCategory:
        """The current category (most severe active condition)."""
        return self._state

    def reasons(self) -> list[str]:
        """Active conditions, most severe first."""
        out: list[str] = []
        if self.estop.latched:
            out.append("estop")
        out.extend(sorted(self.cat1_reasons))
        if self.awaiting_after_reset_s is not None:
            out.append("awaiting_command_after_reset")
        if self.cat2_reason is not None:
            out.append(self.cat2_reason)
        return out

    def _latch_cat1(self, reason: str, now_s: float) -> None:
        self.cat1_reasons[reason] = now_s

    def _recompute(self) -> StopCategory:
        state = StopCategory.NONE
        if self.cat2_reason is not None or self.awaiting_after_reset_s is not None:
            state = StopCategory.CAT2
        if self.cat1_reasons:
            state = StopCategory.CAT1
        if self.estop.latched:
            state = StopCategory.most_severe(state, self.estop_category)
        if state != self._state and state != StopCategory.NONE:
            self.entries[state] += 1
        self._state = state
        return state

    def _detect_backward_clock(self, now_s: float) -> None:
        """Hold (CAT2 ``clock_jump``) and re-base every stored time when the clock went back."""
        cfg = self.config
        tolerance_s = min(cfg.command_timeout_s, cfg.joint_state_timeout_s)
        stored = [t for t in (self.last_joint_state_s, self.last_command_s) if t is not None]
        if not stored or now_s >= max(stored) - tolerance_s:
            return
        if self.last_joint_state_s is not None:
            self.last_joint_state_s = min(self.last_joint_state_s, now_s)
        if self.last_command_s is not None:
            self.last_command_s = min(self.last_command_s, now_s)
        if self.awaiting_after_reset_s is not None:
            self.awaiting_after_reset_s = min(self.awaiting_after_reset_s, now_s)
        for reason, since_s in self.cat1_reasons.items():
            self.cat1_reasons[reason] = min(since_s, now_s)
        self.cat2_reason = "clock_jump"
        self.clock_jumps += 1

    def update(self, now_s: float) -> StopCategory:
        """Apply the timeouts at ``now_s`` and return the category."""
        cfg = self.config
        self._detect_backward_clock(now_s)
        if (
            self.last_joint_state_s is not None
            and now_s - self.last_joint_state_s > cfg.joint_state_timeout_s
        ):
            self._latch_cat1("joint_state_lost", now_s)
        if self.last_command_s is not None and now_s - self.last_command_s > cfg.command_timeout_s:
            # Keep the first detection: any command stamped after it ends the silence.
            self.cat1_reasons.setdefault("command_silence", now_s)
        return self._recompute()

    def on_joint_state(self, now_s: float, tracking_ok: bool) -> None:
        """A joint state arrived; ``tracking_ok`` says the output is being followed."""
        self.last_joint_state_s = now_s
        if tracking_ok:
            self.consecutive_tracking_errors = 0
        else:
            self.consecutive_tracking_errors += 1
            if self.consecutive_tracking_errors >= self.config.violation_persist_count:
                self._latch_cat1("tracking_error", now_s)

    def on_invalid_command(self, reason: str, now_s: float) -> None:
        """An invalid command was rejected (CAT2 if stale, CAT1 if violations persist)."""
        self.consecutive_violations += 1
        if reason == "stale":
            self.cat2_reason = "stale_command"
        if self.consecutive_violations >= self.config.violation_persist_count:
            self._latch_cat1("violation", now_s)
        self._recompute()

    def on_valid_command(self, stamp_s: float, now_s: float) -> bool:
        """A valid command arrived; True if it may drive motion now."""
        self.consecutive_violations = 0
        self.last_command_s = now_s
        self.cat2_reason = None
        if self.awaiting_after_reset_s is not None and stamp_s > self.awaiting_after_reset_s:
            self.awaiting_after_reset_s = None
        joint_state_fresh = (
            self.last_joint_state_s is None
            or now_s - self.last_joint_state_s <= self.config.joint_state_timeout_s
        )
        for reason, since_s in list(self.cat1_reasons.items()):
            cause_gone = True
            if reason == "joint_state_lost":
                cause_gone = joint_state_fresh
            elif reason == "tracking_error":
                cause_gone = self.consecutive_tracking_errors == 0
            if cause_gone and stamp_s > since_s:
                del self.cat1_reasons[reason]
        return self._recompute() == StopCategory.NONE

    def trigger_estop(self, now_s: float) -> None:
        """Latch the e-stop."""
        self.estop.trigger(now_s)
        self._recompute()

    def reset_estop(self, now_s: float) -> bool:
        """Clear the e-stop latch; motion waits for a command stamped after ``now_s``."""
        if not self.estop.reset(now_s):
            return False
        self.awaiting_after_reset_s = now_s
        self._recompute()
        return True
