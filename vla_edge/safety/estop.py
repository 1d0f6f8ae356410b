"""The emergency-stop latch.

``trigger`` latches; ``reset`` clears the latch but never resumes motion by
itself: the supervisor only moves again after a command stamped *after* the
reset arrives, and that command is approached through the limiter from the
held position.
"""

from __future__ import annotations


class EStopLatch:
    """Latched e-stop with the time of the last reset."""

    def __init__(self) -> None:
        self.latched = False
        self.triggered_s: float | None = None
        self.reset_s: float | None = None

    def trigger(self, now_s: float) -> None:
        """Latch (idempotent; the first trigger time is kept)."""
        if not self.latched:
            self.triggered_s = now_s
        self.latched = True

    def reset(self, now_s: float) -> bool:
        """Clear the latch; True if it was latched."""
        if not self.latched:
            return False
        self.latched = False
        self.reset_s = now_s
        return True
