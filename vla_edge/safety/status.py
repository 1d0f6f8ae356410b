"""Status levels and the status record published on ``/diagnostics``."""

from __future__ import annotations

from enum import IntEnum

from vla_edge.core.stop import StopCategory


class StatusLevel(IntEnum):
    """``diagnostic_msgs/DiagnosticStatus`` levels."""

    OK = 0
    WARN = 1
    ERROR = 2
    STALE = 3


def level_for(state: StopCategory) -> StatusLevel:
    """OK in normal operation, WARN for a category-2 hold, ERROR for CAT1/CAT0."""
    if state == StopCategory.NONE:
        return StatusLevel.OK
    if state == StopCategory.CAT2:
        return StatusLevel.WARN
    return StatusLevel.ERROR
