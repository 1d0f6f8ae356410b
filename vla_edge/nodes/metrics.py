"""Bounded-memory run statistics and bad-input accounting shared by the nodes.

* :class:`Histogram` keeps fixed-width bins so a node can report run-long
  percentiles (p50/p95/p99) on ``/diagnostics`` for hours without growing; it
  also publishes its non-empty bins, so a reader that keeps two readings has
  the exact histogram of the time between them (:func:`bins_percentile`).
* :class:`PeriodJitter` turns timer callback instants into period jitter.
* :class:`BadInputCounter` counts bad input per cause and says when a cause is
  new, so a node logs each cause once and counts every occurrence.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np


class Histogram:
    """Fixed-width histogram of non-negative values with an exact max and mean.

    Values above ``max_value`` fall in an overflow bin (their percentile is
    reported as the exact maximum).
    """

    def __init__(self, bin_width: float, max_value: float) -> None:
        if not (bin_width > 0.0 and max_value > bin_width):
            raise ValueError(f"need 0 < bin_width ({bin_width}) < max_value ({max_value})")
        self.bin_width = float(bin_width)
        self._bins = np.zeros(int(math.ceil(max_value / bin_width)) + 1, dtype=np.int64)
        self.count = 0
        self.max = 0.0
        self._sum = 0.0

    def add(self, value: float) -> None:
        """Record one value (negative values count as 0; non-finite ones are ignored)."""
        if not math.isfinite(value):
            return
        value = max(0.0, float(value))
        index = min(int(value / self.bin_width), self._bins.size - 1)
        self._bins[index] += 1
        self.count += 1
        self._sum += value
        self.max = max(self.max, value)

    def copy(self) -> Histogram:
        """An independent copy (a snapshot taken under a lock, summarised after it)."""
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)
        other._bins = self._bins.copy()
        return other

    @property
    def mean(self) -> float:
        """Mean of the recorded values (0 when empty)."""
        return self._sum / self.count if self.count else 0.0

    def percentile(self, q: float) -> float:
        """``q``-th percentile (0..100), resolved to the upper edge of its bin, capped at max."""
        if self.count == 0:
            return 0.0
        rank = max(1, int(math.ceil(q / 100.0 * self.count)))
        index = int(np.searchsorted(np.cumsum(self._bins), rank))
        if index >= self._bins.size - 1:
            return self.max
        return min((index + 1) * self.bin_width, self.max)

    def bins(self) -> str:
        """The non-empty bins, ``index:count`` pairs joined by ``,`` (the overflow bin last)."""
        return ",".join(f"{i}:{self._bins[i]}" for i in np.flatnonzero(self._bins))

    def summary(self, prefix: str) -> dict[str, float | int | str]:
        """Percentiles (p50, p95, p99), max, mean, count, bins and bin width, ``{prefix}_…``."""
        return {
            f"{prefix}_p50": self.percentile(50),
            f"{prefix}_p95": self.percentile(95),
            f"{prefix}_p99": self.percentile(99),
            f"{prefix}_max": self.max,
            f"{prefix}_mean": self.mean,
            f"{prefix}_count": self.count,
            f"{prefix}_bins": self.bins(),
            f"{prefix}_bin_width": self.bin_width,
        }


def parse_bins(text: str) -> dict[int, int]:
    """:meth:`Histogram.bins` back to ``{index: count}``.

    Raises:
        ValueError: not ``index:count`` pairs of integers.
    """
    out: dict[int, int] = {}
    for pair in filter(None, text.split(",")):
        index, count = pair.split(":")
        out[int(index)] = int(count)
    return out


def bins_percentile(
    after: dict[int, int], before: dict[int, int] | None, bin_width: float, q: float
) -> float | None:
    """The ``q``-th percentile of the values recorded between two readings of a histogram.

    Resolved to the upper edge of its bin (the overflow bin counts at its lower
    edge). ``before`` is ``None`` (or holds more than ``after``: the node
    restarted, its histogram began again) when ``after`` alone is the span.
    ``None`` when nothing was recorded in between.
    """
    if before is not None and any(c > after.get(i, 0) for i, c in before.items()):
        before = None
    diff = {i: c - (before or {}).get(i, 0) for i, c in after.items()}
    diff = {i: c for i, c in sorted(diff.items()) if c > 0}
    total = sum(diff.values())
    if total == 0:
        return None
    rank = max(1, math.ceil(q / 100.0 * total))
    seen = 0
    for index, count in diff.items():
        seen += count
        if seen >= rank:
            return (index + 1) * bin_width
    return None  # pragma: no cover - rank <= total


class PeriodJitter:
    """Period jitter ``|period - nominal|`` of a periodic callback, in ms."""

    def __init__(self, nominal_period_s: float, max_jitter_ms: float = 100.0) -> None:
        self.nominal_period_s = float(nominal_period_s)
        self.jitter_ms = Histogram(0.01, max_jitter_ms)
        self.period_ms = Histogram(0.01, max(max_jitter_ms, 10.0 * nominal_period_s * 1e3))
        self._last_s: float | None = None

    def tick(self, now_s: float) -> float | None:
        """Record a callback at monotonic time ``now_s``; return this period's jitter in ms."""
        last, self._last_s = self._last_s, now_s
        if last is None:
            return None
        period_ms = (now_s - last) * 1e3
        jitter_ms = abs(period_ms - self.nominal_period_s * 1e3)
        self.period_ms.add(period_ms)
        self.jitter_ms.add(jitter_ms)
        return jitter_ms


class BadInputCounter:
    """Counts bad input per cause; reports each cause as new exactly once.

    ``log`` (e.g. a node logger's ``warning``) is called once per cause with the
    first message; every occurrence is counted in :attr:`counts`.
    """

    def __init__(self, log: Callable[[str], object]) -> None:
        self._log = log
        self.counts: dict[str, int] = {}

    def record(self, cause: str, message: str) -> bool:
        """Count one occurrence of ``cause``; log and return True the first time."""
        first = cause not in self.counts
        self.counts[cause] = self.counts.get(cause, 0) + 1
        if first:
            self._log(f"bad input ({cause}): {message} (logged once; counted on /diagnostics)")
        return first

    @property
    def total(self) -> int:
        """All bad inputs so far."""
        return sum(self.counts.values())

    def as_values(self, prefix: str = "bad_input") -> dict[str, int]:
        """``{prefix}.<cause>: count`` plus ``{prefix}.total``."""
        out = {f"{prefix}.{cause}": n for cause, n in sorted(self.counts.items())}
        out[f"{prefix}.total"] = self.total
        return out
