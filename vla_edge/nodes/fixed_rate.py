"""A fixed-rate loop on its own thread, with absolute deadlines.

An rclpy timer fires through the executor, behind every subscription callback
of the node; a control loop instead gets its own thread, wakes at
``t0 + k * period`` (no drift), and, where the OS allows it, runs at
``SCHED_FIFO`` priority like ros2_control's controller manager. Missed
deadlines are skipped, not bunched: after a stall the loop resumes on the grid.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable


def try_realtime_priority(priority: int) -> str:
    """Put the calling thread under ``SCHED_FIFO`` at ``priority``.

    Returns:
        ``"SCHED_FIFO <priority>"`` on success, else why not (the thread stays
        under the default scheduler).
    """
    if priority <= 0:
        return "default scheduler (priority 0 requested)"
    if not hasattr(os, "sched_setscheduler"):
        return "default scheduler (no sched_setscheduler on this OS)"
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except (OSError, PermissionError) as exc:
        return f"default scheduler (SCHED_FIFO refused: {exc})"
    return f"SCHED_FIFO {priority}"


def try_realtime_process(priority: int) -> str:
    """Put every thread of this process (executor, DDS, …) under ``SCHED_FIFO``.

    A node's loop is only as punctual as the threads that deliver its input:
    on a loaded machine the DDS receive and executor threads of a normal
    process starve for whole scheduler slices. Threads created later inherit
    the policy. The kernel's RT throttling (``sched_rt_runtime_us``) still
    leaves the rest of the machine its share.

    Returns:
        ``"SCHED_FIFO <priority> (<n> threads)"`` or why not.
    """
    if priority <= 0:
        return "default scheduler (priority 0 requested)"
    if not hasattr(os, "sched_setscheduler"):
        return "default scheduler (no sched_setscheduler on this OS)"
    try:
        tids = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError as exc:
        return f"default scheduler (cannot list threads: {exc})"
    done = 0
    for tid in tids:
        try:
            os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(priority))
            done += 1
        except ProcessLookupError:
            continue  # the thread has exited meanwhile
        except (OSError, PermissionError) as exc:
            return f"default scheduler (SCHED_FIFO refused: {exc})"
    return f"SCHED_FIFO {priority} ({done} threads)"


class FixedRateLoop:
    """Calls ``tick()`` every ``1 / rate_hz`` seconds on a dedicated thread.

    Args:
        rate_hz: loop rate.
        tick: the work of one period (exceptions stop nothing: they are passed
            to ``on_error`` and the loop goes on).
        on_error: called with any exception ``tick`` raises.
        realtime_priority: ``SCHED_FIFO`` priority to request (0 = don't).
        name: thread name.
    """

    def __init__(
        self,
        rate_hz: float,
        tick: Callable[[], None],
        on_error: Callable[[BaseException], None],
        realtime_priority: int = 0,
        name: str = "fixed_rate_loop",
    ) -> None:
        if not (math.isfinite(rate_hz) and rate_hz > 0.0):
            raise ValueError(f"rate_hz = {rate_hz}: must be > 0")
        self.period_s = 1.0 / rate_hz
        self._tick = tick
        self._on_error = on_error
        self._priority = realtime_priority
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.scheduler = "not started"
        self.ticks = 0
        self.missed_deadlines = 0

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> bool:
        """Stop the thread and wait up to ``timeout_s`` for it; whether it ended."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        self.scheduler = try_realtime_priority(self._priority)
        next_s = time.monotonic()
        while not self._stop.is_set():
            next_s += self.period_s
            delay_s = next_s - time.monotonic()
            if delay_s > 0.0:
                if self._stop.wait(delay_s):
                    return
            elif -delay_s >= self.period_s:  # a whole period late: skip to the grid
                skipped = int(-delay_s / self.period_s)
                self.missed_deadlines += skipped
                next_s += skipped * self.period_s
            try:
                self._tick()
            except Exception as exc:  # noqa: BLE001 - reported, the loop must go on
                self._on_error(exc)
            self.ticks += 1
