"""Named heartbeats with timeouts, each mapped to a stop category.

A heartbeat is expired when more than its timeout has passed since its last
beat (exactly the timeout is still alive). A heartbeat that never beat counts
as expired unless the watchdog was started with ``start_s`` (a grace period
from start-up).
"""

from __future__ import annotations

import math

from vla_edge.config.models import ControllerConfig
from vla_edge.core.errors import WatchdogError
from vla_edge.core.stop import StopCategory


class Watchdog:
    """Heartbeats ``name -> (timeout_s, category)``; ``check`` gives the worst expired."""

    def __init__(
        self,
        heartbeats: dict[str, tuple[float, StopCategory]],
        start_s: float | None = None,
    ) -> None:
        for name, (timeout_s, category) in heartbeats.items():
            if not (math.isfinite(timeout_s) and timeout_s > 0.0):
                raise WatchdogError(f"heartbeat {name!r}: timeout_s = {timeout_s} must be > 0")
            if not isinstance(category, StopCategory):
                raise WatchdogError(
                    f"heartbeat {name!r}: category = {category!r} must be a StopCategory"
                )
        self._heartbeats = dict(heartbeats)
        self._last_s: dict[str, float | None] = {name: start_s for name in heartbeats}

    @classmethod
    def from_controller_config(
        cls, config: ControllerConfig, start_s: float | None = None
    ) -> Watchdog:
        """The standard heartbeats: observation, joint_state, chunk, control_loop."""
        return cls(
            {
                "observation": (config.observation_timeout_s, StopCategory.CAT1),
                "joint_state": (config.joint_state_timeout_s, StopCategory.CAT1),
                "chunk": (config.chunk_timeout_s, StopCategory.CAT2),
                "control_loop": (config.control_loop_timeout_s, StopCategory.CAT1),
            },
            start_s=start_s,
        )

    @property
    def names(self) -> list[str]:
        """Heartbeat names in registration order."""
        return list(self._heartbeats)

    def beat(self, name: str, now_s: float) -> None:
        """Record that ``name`` is alive at ``now_s``."""
        if name not in self._heartbeats:
            raise WatchdogError(f"heartbeat {name!r} unknown (expected one of {self.names})")
        self._last_s[name] = now_s

    def restart(self, now_s: float) -> None:
        """Re-base every heartbeat at ``now_s`` after a clock jump.

        Beats stamped on the old clock would otherwise look far in the future
        (never expiring) or far in the past (expiring at once); each source
        gets one timeout on the new clock to beat again.
        """
        for name in self._heartbeats:
            self._last_s[name] = now_s

    def age_s(self, name: str, now_s: float) -> float:
        """Seconds since the last beat of ``name`` (``inf`` if it never beat)."""
        if name not in self._heartbeats:
            raise WatchdogError(f"heartbeat {name!r} unknown (expected one of {self.names})")
        last_s = self._last_s[name]
        return math.inf if last_s is None else now_s - last_s

    def expired(self, now_s: float) -> list[str]:
        """Names whose age exceeds their timeout."""
        return [
            name
            for name, (timeout_s, _) in self._heartbeats.items()
            if self.age_s(name, now_s) > timeout_s
        ]

    def check(self, now_s: float) -> StopCategory:
        """The most severe category among the expired heartbeats (``NONE`` if none)."""
        return StopCategory.most_severe(*(self._heartbeats[n][1] for n in self.expired(now_s)))
