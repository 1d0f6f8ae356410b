"""Stop categories after IEC 60204-1 / ISO 10218."""

from enum import StrEnum


class StopCategory(StrEnum):
    """What the robot must do; ordered by severity (``CAT0`` is the most severe).

    * ``NONE``: normal operation.
    * ``CAT2``: controlled stop, power kept, hold position; resumes on fresh input.
    * ``CAT1``: controlled stop, then hold; needs fresh input (and, for a latch, a
      reset) to resume.
    * ``CAT0``: immediate stop (hold the last safe position, no further motion).
    """

    NONE = "none"
    CAT2 = "cat2"
    CAT1 = "cat1"
    CAT0 = "cat0"

    @property
    def severity(self) -> int:
        """0 for ``NONE`` up to 3 for ``CAT0``."""
        return _SEVERITY[self]

    @staticmethod
    def most_severe(*categories: "StopCategory") -> "StopCategory":
        """Return the most severe of ``categories`` (``NONE`` when empty)."""
        worst = StopCategory.NONE
        for category in categories:
            if category.severity > worst.severity:
                worst = category
        return worst


_SEVERITY = {
    StopCategory.NONE: 0,
    StopCategory.CAT2: 1,
    StopCategory.CAT1: 2,
    StopCategory.CAT0: 3,
}
