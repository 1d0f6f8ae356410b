"""Steps of a wall clock: what every component that schedules by time re-anchors on.

The system clock can step (an NTP correction, a manual set, a sim-time reset).
A component that keeps stamps or deadlines on that clock sees a step between two
successive readings: backwards by any amount, or forwards by more than the
largest gap its readings normally have. Stored times on the old clock then mean
nothing (a deadline seconds in the future, a "newest" stamp the new clock will
not pass for seconds), so the component re-anchors them on the new clock
instead of waiting for the clock to catch up.
"""

from __future__ import annotations

import math

TIME_EPS_S = 1e-9
"""Slack when comparing two times on the same grid (a tick, a deadline, a chunk step).

Times built by adding periods pick up rounding; a comparison with this slack
counts a time that is equal up to rounding as reached.
"""

# Below this a backward reading is taken as the same instant (two threads reading the
# clock just before taking the same lock); a real step is far larger.
BACKWARD_TOLERANCE_S = 1e-3


class ClockStepDetector:
    """Detects a step of a clock between successive readings.

    Args:
        forward_threshold_s: a forward gap larger than this is a step (it must
            exceed the longest normal gap between two readings).
    """

    def __init__(self, forward_threshold_s: float) -> None:
        if not (math.isfinite(forward_threshold_s) and forward_threshold_s > 0.0):
            raise ValueError(f"forward_threshold_s = {forward_threshold_s}: must be > 0")
        self.forward_threshold_s = float(forward_threshold_s)
        self.last_s: float | None = None
        self.steps = 0

    def step_s(self, now_s: float) -> float:
        """Record a reading; the step since the previous one (0.0 when there is none).

        A non-finite reading is ignored (0.0): it is no time to anchor on.
        """
        if not math.isfinite(now_s):
            return 0.0
        last_s, self.last_s = self.last_s, float(now_s)
        if last_s is None:
            return 0.0
        gap_s = now_s - last_s
        if gap_s < -BACKWARD_TOLERANCE_S or gap_s > self.forward_threshold_s:
            self.steps += 1
            return gap_s
        return 0.0
